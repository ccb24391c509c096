"""The collective operations strategies need, and nothing more."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Sequence

import torch


class CollectiveTimeout(RuntimeError):
    """A peer did not arrive at a collective within the run's worker timeout."""


class Group(ABC):
    rank: int
    world_size: int

    @abstractmethod
    def barrier(self) -> None:
        """Return once every rank has called it."""

    @abstractmethod
    def average_(self, tensors: Sequence[torch.Tensor]) -> None:
        """Replace every tensor by its mean over ranks; the result is bitwise equal on all ranks."""

    @abstractmethod
    def broadcast_(self, tensors: Sequence[torch.Tensor], src: int = 0) -> None:
        """Overwrite every tensor with rank ``src``'s values."""

    def close(self) -> None:
        """Release what the group holds in this process."""
