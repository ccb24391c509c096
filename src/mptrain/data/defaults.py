"""What a data set recommends when the user does not say: :class:`TrainingDefaults`, one per
source (``data.sources``), the lowest layer of a run's settings."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class TrainingDefaults:
    """What a data set recommends when the user does not say (see ``data.sources``)."""

    epochs: int = 10
    batch_size: int = 64
    lr: float = 0.01
    momentum: float = 0.0
    optimizer: str = "sgd"
    lr_decay: float = 1.0  # learning rate multiplied by this after every epoch
    lr_schedule: str = "step"
    sync_every: int | None = None  # None: once per epoch
    #: fedavg's own recipe (McMahan et al. 2017: plain client SGD, small batches); the
    #: epoch strategies' recipe (Adam halved every epoch) does not fit rounds.
    federated: Mapping[str, Any] = dataclasses.field(default_factory=lambda: {
        "rounds": 20, "clients": 100, "clients_per_round": 10, "batch_size": 32,
        "lr": 0.05, "momentum": 0.0, "optimizer": "sgd", "lr_decay": 1.0})

    def common(self) -> dict:
        """The recipe for epochs of data-parallel training (a strategy adjusts it:
        ``Strategy.recommended``)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name != "federated"}
