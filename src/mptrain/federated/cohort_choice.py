"""``--vectorize-clients auto|on|off``: which path trains a run's clients, and the line
that says so.

``auto`` measures before the first round: a few steps of the first cohort stacked against
the same clients' same steps one at a time, each after a warm-up step, on the worker that
decides for all (rank 0). It vectorizes only when stacked is at least ``AUTO_MARGIN``
faster: a probe of a few steps is noisy on a loaded machine, and a wrong "on" must not
cost more than a few percent (a stacked CNN on a 2-core CPU, for one, measured 0.8x of one
at a time in issue 39's table). The choice is timed, so two ``auto`` runs may choose
differently on a machine whose load changes; ``on`` or ``off`` pin it (and a checkpoint
keeps the path it ran, so a resume continues on it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import torch

MODES = ("auto", "on", "off")
#: Stacked must measure this much faster than one at a time for ``auto`` to choose it.
AUTO_MARGIN = 1.1
#: Timed steps of the probe, after one warm-up step each way.
PROBE_STEPS = 4


@dataclass(frozen=True)
class ClientPath:
    """The path a run's clients train on: ``chunk`` clients per cohort (0: one at a
    time), and why."""

    chunk: int
    reason: str = ""
    speedup: float | None = None     # auto's measured stacked / one-at-a-time rate

    @property
    def vectorized(self) -> bool:
        return self.chunk > 0

    def describe(self) -> str:
        """``vectorized x50`` or ``one client at a time: <reason>``, for the banner and
        the summary."""
        if self.vectorized:
            measured = f" ({self.speedup:.2f}x measured)" if self.speedup else ""
            return f"vectorized x{self.chunk}{measured}"
        return f"one client at a time: {self.reason}" if self.reason \
            else "one client at a time"

    def as_tensor(self) -> torch.Tensor:
        """For a broadcast from the deciding rank: chunk and speedup (0: none)."""
        return torch.tensor([float(self.chunk), self.speedup or 0.0], dtype=torch.float32)

    @classmethod
    def from_tensor(cls, values: torch.Tensor, reason: str) -> "ClientPath":
        chunk, speedup = int(values[0]), float(values[1])
        return cls(chunk, "" if chunk else reason, speedup or None)


def timed(run: Callable[[], None], synchronize: Callable[[], None] | None = None) -> float:
    """Seconds ``run`` takes (after ``synchronize``, for work queued on a GPU)."""
    started = time.perf_counter()
    run()
    if synchronize is not None:
        synchronize()
    return time.perf_counter() - started


def auto_choice(stacked_seconds: float, alone_seconds: float, chunk: int) -> ClientPath:
    """``auto``'s verdict from the probe's two timings of the same work."""
    speedup = alone_seconds / stacked_seconds if stacked_seconds > 0 else float("inf")
    if speedup >= AUTO_MARGIN:
        return ClientPath(chunk, speedup=speedup)
    return ClientPath(0, f"stacked measured {speedup:.2f}x of one at a time on the first "
                         f"cohort (auto needs {AUTO_MARGIN:g}x)", speedup)
