"""FedBuff (Nguyen et al., AISTATS 2022) -- and with ``--buffer-size 1`` FedAsync (Xie et al.
2019) -- on mptrain's worker processes, in virtual-time order.

The server keeps ``--concurrency K`` clients training; each finished update, weighted by its
staleness, enters a buffer, and every ``--buffer-size B`` updates the server applies their
combination with the server optimizer. How long each update takes is the virtual clock's
(``federated.clock``), never a training result, so the whole sequence of events is computed
ahead from the seed (``federated.asynchronous.schedule``), by every process alike. The
clients that start from one server version all start from the same model: a worker trains
them as fedavg trains a round's (one at a time or in stacked cohorts), and their changes wait
in a shared pending table until the step that applies them. The order of every sum is the
schedule's, so the same seed gives the bitwise same model whatever ``--workers`` is.

The parts, one line per file:

- ``settings``: what fedbuff takes of the federated section, and K's and B's defaults;
- ``refusals``: sizes that cannot hold, and differential privacy, refused with the reason;
- ``clock``: the clock's speeds and availability made into the run's schedule;
- ``strategy``: the parent's side -- facts, the checks before anything starts, reports;
- ``shared``: the pending table of ``K + B`` rows next to fedavg's shared state;
- ``worker``: one worker's server step -- train this version's clients, then the buffer;
- ``checkpoint``: the server's state and the updates in flight, and back;
- ``report``: a step's figures, its row and line, summary.json, the banner.

The maths (schedule, staleness weights, the buffer's change) is in
``mptrain.federated.asynchronous``; client training, cohorts and the server optimizer are
fedavg's.
"""

from ...imports import lazy_exports

__all__ = ["FedBuffStrategy"]
__getattr__, __dir__ = lazy_exports(__name__, {"FedBuffStrategy": ".strategy"})
