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

    def weighted_average_(self, tensors: Sequence[torch.Tensor], weight: float) -> float:
        """Replace every tensor by ``sum_r weight_r * tensor_r / sum_r weight_r`` over ranks
        and return ``sum_r weight_r``; a rank with weight 0 contributes nothing (FedAvg with
        client sample counts as weights).

        Built on :meth:`average_` (the mean of ``weight * tensor`` over the mean of
        ``weight``), so every implementation has it; if every weight is 0 the tensors are
        left as they are.
        """
        scaled = [t.detach() * weight for t in tensors]
        total = torch.tensor([float(weight)], dtype=scaled[0].dtype if scaled else None)
        self.average_(scaled + [total])
        if total.item() <= 0:
            return 0.0
        for tensor, summed in zip(tensors, scaled):
            tensor.detach().copy_(summed / total)
        return total.item() * self.world_size

    def close(self) -> None:
        """Release what the group holds in this process."""
