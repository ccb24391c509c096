"""Pure averaging math, tested without processes.

Every rank runs the same additions in the same order (rank 0, 1, 2, ...), so every rank gets
the bitwise-same result: replicas never drift apart by float rounding.
"""

from __future__ import annotations

from typing import Sequence

import torch


def mean_in_rank_order(slots: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``out = (slots[0] + slots[1] + ... ) / len(slots)``, summed in rank order."""
    out.copy_(slots[0])
    for row in slots[1:]:
        out.add_(row)
    return out.div_(len(slots))


def weighted_average(tensors: Sequence[torch.Tensor], weights: Sequence[float]) -> torch.Tensor:
    """Average of ``tensors`` weighted by ``weights`` (e.g. client sample counts in FedAvg)."""
    if len(tensors) != len(weights) or not tensors:
        raise ValueError("need one weight per tensor and at least one tensor")
    total = float(sum(weights))
    if total <= 0:
        raise ValueError("weights must sum to a positive number")
    result = torch.zeros_like(tensors[0], dtype=torch.float64)
    for tensor, weight in zip(tensors, weights):
        result.add_(tensor, alpha=weight / total)   # promoted to float64 inside the add
    return result.to(tensors[0].dtype)
