"""Combine the per-rank round reports into the numbers a person reads (pure functions).

A round is an epoch, or a round of sampled clients for ``fedavg``; rows keep the key
``epoch`` (the 1-based round number) for every strategy, and a strategy adds its own
columns (``extras``: fedavg's ``round``, ``clients``, ``mean_client_loss``, ...).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Sequence

from ..data.sources import CLASSIFICATION
from ..engine.gpu_memory import GPU_PEAK, fullest_gpu
from ..engine.profile import mean_over_ranks


@dataclass(frozen=True)
class RoundMetrics:
    epoch: int                  # 1-based, as printed
    train_loss: float | None   # None when every client of a fedavg round failed
    test_loss: float | None
    test_accuracy: float | None
    test_mse: float | None
    samples_per_s: float
    epoch_s: float
    train_samples: int
    steps: int
    minor_faults: int
    elapsed_s: float | None = None   # run start to the end of this epoch's evaluation
    extras: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        row = asdict(self)
        row.update(row.pop("extras"))
        return row

    @classmethod
    def from_dict(cls, row: dict) -> "RoundMetrics":
        """Inverse of :meth:`as_dict` (rows kept in a checkpoint)."""
        known = {f.name for f in fields(cls)} - {"extras"}
        return cls(**{k: v for k, v in row.items() if k in known},
                   extras={k: v for k, v in row.items() if k not in known})


def combine(reports: Sequence, task: str, run_started: float | None = None,
            extras: dict | None = None) -> RoundMetrics:
    """One epoch's metrics from every rank's ``RoundReport``.

    The epoch's time runs from the first rank's first step to the last rank's last step, so
    a straggler counts; the train loss is the sample-weighted mean over all ranks.
    """
    if not reports:
        raise ValueError("no reports to combine")
    samples = sum(r.train_samples for r in reports)
    seconds = max(r.train_ended for r in reports) - min(r.train_started for r in reports)
    eval_count = sum(r.eval_count for r in reports)
    test_loss = sum(r.eval_loss_sum for r in reports) / eval_count if eval_count else None
    accuracy = mse = None
    if eval_count and task == CLASSIFICATION:
        accuracy = sum(r.eval_correct for r in reports) / eval_count
    elif eval_count:
        mse = test_loss
    # The ranks' mean seconds in each phase of their steps (engine.profile), as time_*
    # columns beside the strategy's own.
    profile = mean_over_ranks([r.extras.get("profile") for r in reports])
    columns = {f"time_{phase}": seconds for phase, seconds in (profile or {}).items()}
    fullest = fullest_gpu([r.extras for r in reports])
    if fullest is not None:
        columns[GPU_PEAK] = fullest
    return RoundMetrics(
        epoch=reports[0].index + 1,
        train_loss=sum(r.train_loss_sum for r in reports) / samples if samples else None,
        test_loss=test_loss, test_accuracy=accuracy, test_mse=mse,
        samples_per_s=samples / seconds if seconds > 0 else float("inf"),
        epoch_s=seconds, train_samples=samples, steps=max(r.steps for r in reports),
        minor_faults=sum(r.minor_faults for r in reports),
        elapsed_s=(max(r.evaluated_at for r in reports) - run_started
                   if run_started is not None else None),
        extras={**columns, **(extras or {})},
    )


class RoundCollector:
    """Buffers reports until every rank has reported an epoch, then yields its metrics."""

    def __init__(self, world_size: int, task: str, run_started: float | None = None,
                 extras=None):
        self._world_size = world_size
        self._task = task
        self._run_started = run_started
        self._extras = extras or (lambda reports: {})  # the strategy's own columns
        self._pending: dict[int, list] = {}
        self.first_step_at: float | None = None

    def add(self, report) -> tuple[RoundMetrics | None, list]:
        """Return the epoch's metrics and reports once every rank is in, else (None, [])."""
        if self.first_step_at is None or report.train_started < self.first_step_at:
            self.first_step_at = report.train_started
        ranks = self._pending.setdefault(report.index, [])
        ranks.append(report)
        if len(ranks) < self._world_size:
            return None, []
        del self._pending[report.index]
        ranks.sort(key=lambda r: r.rank)
        return combine(ranks, self._task, self._run_started, self._extras(ranks)), ranks

    def reset(self) -> None:
        """Forget partial epochs (after a restart, the workers redo them)."""
        self._pending.clear()
