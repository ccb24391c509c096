"""fedbuff's glue to the virtual clock (``federated.clock``): the run's client speeds and
availability made into the event schedule every process computes for itself
(``federated.asynchronous.schedule``). The same settings, data and model give every process
the same schedule: nothing in it depends on a training result or on the wall clock."""

from __future__ import annotations

from typing import Sequence

from ...federated.asynchronous.schedule import EventSchedule
from ..fedavg.personal_setup import personal_extra_epochs
from .settings import buffer_size_of, concurrency_of

#: The clock's default device model when --client-speeds is not given: FedScale's
#: lognormal(1, 0.6) x 5 ms a sample, the Speedtest median mobile link.
DEFAULT_SPEEDS = "lognormal"


def event_schedule(config, sizes: Sequence[int], model_bytes: int) -> EventSchedule:
    """The run's schedule: client ``c`` takes ``update_seconds(c, sizes[c], epochs,
    model_bytes)`` virtual seconds an update -- its local epochs, and with --personalize the
    epochs its personal state trains beside them (FedRep's head, Ditto's own model)."""
    from ...federated.clock import availability_trace, client_speeds

    f = config.fedavg
    speeds = client_speeds(f.client_speeds or DEFAULT_SPEEDS, f.clients, config.seed)
    trace = availability_trace(f.availability_trace, f.clients) \
        if f.availability_trace else None
    epochs = f.local_epochs + personal_extra_epochs(config)   # FedRep's head, Ditto's model
    seconds = [speeds.update_seconds(client, sizes[client], epochs, model_bytes)
               for client in range(f.clients)]
    return EventSchedule(f.clients, concurrency_of(f), buffer_size_of(f), seconds.__getitem__,
                         config.seed, f.max_staleness, trace)


def model_bytes_of(numel: int) -> int:
    """Bytes of one model download or update upload: float32 numbers."""
    return 4 * numel
