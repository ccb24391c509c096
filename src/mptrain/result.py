"""What ``fit()`` returns."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch.nn as nn

from .config import TrainConfig


@dataclass
class FitResult:
    """What a run produced: the trained model, per-round metrics and the summary.

    ``epochs`` holds one row per round of work: an epoch, or a round for ``fedavg`` (also
    reachable as ``rounds``).
    """

    model: nn.Module
    config: TrainConfig
    epochs: list = field(default_factory=list)   # report.metrics.RoundMetrics
    summary: dict = field(default_factory=dict)
    restarts: int = 0

    @property
    def rounds(self) -> list:
        return self.epochs

    @property
    def test_accuracy(self) -> float | None:
        return self.summary.get("test_accuracy")

    @property
    def test_mse(self) -> float | None:
        return self.summary.get("test_mse")
