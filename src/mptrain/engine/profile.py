"""Where a rank's training time goes: reading batches, its own compute, the collectives, and
of those the time spent waiting for its peers.

"Is parallel worth it here, and if not, why?" needs more than samples/s: two synchronous
ranks that are each as fast as one process still lose throughput when the host delays one of
them and the other waits at every step. Each rank times its round with a few
``perf_counter`` calls per step (well under a microsecond each, against steps of
milliseconds); the parent averages the ranks and writes the shares next to each round's
metrics (``time_*`` columns of metrics.jsonl) and over the run in summary.json, and
``mptrain bench`` prints them per cell.

What is measured where: ``data`` is taking the batch out of the (shared) data set and onto
the device; ``collective`` is the strategy's own communication around a step (sync's
parameter average, ddp's gradient average over shared memory, the end of an epoch's
average); ``waiting`` is the part of it spent at a barrier of the shared-memory group,
which is waiting for the slowest rank, not moving bytes; ``compute`` is the rest of the
step, and of it ``forward`` (zeroing the gradients, the forward pass and the loss),
``backward`` and ``optimizer`` (its step), so that an optimizer that costs as much as the
backward pass, or a forward pass slower in one cell than in another, shows. torch's
DistributedDataParallel all-reduces inside backward, so under it communication counts as
backward. On a GPU the host's clock sees kernel launches, not kernels: the shares are the
CPU's view.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

#: The phases, in the order they are printed; ``forward``, ``backward`` and ``optimizer`` are
#: parts of ``compute``, as ``waiting`` is part of ``collective``.
PHASES = ("compute", "forward", "backward", "optimizer", "data", "collective", "waiting")
COMPUTE_PARTS = ("forward", "backward", "optimizer")


@dataclass
class RoundProfile:
    """Seconds of one rank's round in each phase (see :data:`PHASES`)."""

    compute: float = 0.0
    forward: float = 0.0
    backward: float = 0.0
    optimizer: float = 0.0
    data: float = 0.0
    collective: float = 0.0
    waiting: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


class RoundClock:
    """Times the phases of one round's steps on one rank; ``group`` may count its barrier
    waits (``waits.seconds``, as the shared-memory group does)."""

    def __init__(self, group):
        self._group = group
        self._waited_before = _seconds_waiting(group)
        self.profile = RoundProfile()
        self._mark = time.perf_counter()

    def lap(self) -> float:
        """Seconds since the previous lap (or the start)."""
        now = time.perf_counter()
        seconds, self._mark = now - self._mark, now
        return seconds

    def timed(self, function, phase: str):
        """``function`` wrapped so that its calls add to ``phase`` (and not to the phase
        whose lap they interrupt)."""
        def call(*args, **kwargs):
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent = time.perf_counter() - started
                self.add(phase, spent)
                self._mark += spent   # the lap around this call excludes it
        return call

    def add(self, phase: str, seconds: float) -> None:
        setattr(self.profile, phase, getattr(self.profile, phase) + seconds)

    def lap_part(self, part: str) -> None:
        """The lap since the previous one goes to ``part`` of compute (and to compute)."""
        seconds = self.lap()
        self.add(part, seconds)
        self.add("compute", seconds)

    def finish(self) -> RoundProfile:
        waited = _seconds_waiting(self._group)
        if waited is not None and self._waited_before is not None:
            self.profile.waiting = waited - self._waited_before
        return self.profile


def _seconds_waiting(group) -> float | None:
    waits = getattr(group, "waits", None)
    return waits.seconds if waits is not None else None


def mean_over_ranks(profiles: list[dict]) -> dict | None:
    """The ranks' mean seconds per phase, or None when a rank did not time its round."""
    if not profiles or any(p is None for p in profiles):
        return None
    return {phase: sum(p[phase] for p in profiles) / len(profiles) for phase in PHASES}


def shares(seconds: dict) -> dict:
    """Each phase's share of compute + data + collective (waiting: of the same total)."""
    total = seconds["compute"] + seconds["data"] + seconds["collective"]
    return {phase: (seconds[phase] / total if total > 0 else 0.0) for phase in PHASES}


def describe(part: dict) -> str:
    """``compute 86% (forward 30%, backward 44%, optimizer 9%), data 4%, collective 10%
    (waiting for peers 9%)`` from :func:`shares` (the parts of compute when timed)."""
    parts = ""
    if any(part.get(name) for name in COMPUTE_PARTS):
        parts = " (" + ", ".join(f"{name} {part[name]:.0%}" for name in COMPUTE_PARTS) + ")"
    return (f"compute {part['compute']:.0%}{parts}, data {part['data']:.0%}, collective "
            f"{part['collective']:.0%} (waiting for peers {part['waiting']:.0%})")
