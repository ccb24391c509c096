"""The virtual clock of federated runs: how long each client's update takes and when each
client is online, so that a run can report the time a real deployment would have taken
(``virtual_time_s``) and lose the clients a real one would lose. Computed from seeds, data
sizes and files, never from the wall clock: the same run gives the same times whatever
``--workers`` is. One line per file:

- ``speeds``: per-client compute and link speeds (``--client-speeds``) and an update's
  duration;
- ``trace``: when each client is online (``--availability-trace``, FedScale's layout);
- ``rounds``: a synchronous round on the clock -- its slowest client, ``--round-deadline``,
  ``--over-select`` -- and which clients it keeps;
- ``files``: reading those files as plain data (JSON, CSV, a pickle that may not run code).
"""

from .rounds import ClientRun, RoundTiming, time_round
from .speeds import ClientSpeeds, client_speeds
from .trace import ALWAYS_ONLINE, AvailabilityTrace, availability_trace

__all__ = ["ALWAYS_ONLINE", "AvailabilityTrace", "ClientRun", "ClientSpeeds", "RoundTiming",
           "availability_trace", "client_speeds", "time_round"]
