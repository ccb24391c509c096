"""Aggregating the clients' reported results: a weighted mean (FedAvg) or a plain sum (the
private aggregate), always summed in row (client-id) order, and the slice of the flat
parameter vector each worker aggregates."""

from __future__ import annotations

from typing import Sequence

import torch

from ..comm.reduce import weighted_average, weighted_sum


def column_slice(numel: int, world_size: int, rank: int) -> slice:
    """The part of the flat parameter vector rank ``rank`` aggregates (a reduce-scatter)."""
    per_rank = -(-numel // world_size)
    return slice(min(numel, rank * per_rank), min(numel, (rank + 1) * per_rank))


def aggregate_rows(rows: torch.Tensor, weights: Sequence[float]) -> torch.Tensor:
    """Weighted mean of the clients' rows, summed in row (client-id) order; rows with
    weight 0 (clients that failed, dropped out or sent a non-finite update) are left out.
    At least one weight must be positive."""
    kept = [(row, w) for row, w in zip(rows, weights) if w > 0]
    return weighted_average([row for row, _ in kept], [w for _, w in kept])


def sum_rows(rows: torch.Tensor, weights: Sequence[float]) -> torch.Tensor:
    """The plain sum (float64 accumulator, row order) of the rows whose weight is positive;
    zeros when there is none. What DP-FedAvg adds its noise to: every reporting client
    counts once, whatever its size, so that one client moves the sum by at most the clip."""
    if not len(rows):
        return torch.zeros(rows.shape[1:], dtype=rows.dtype)
    return weighted_sum(rows, [1.0 if weight > 0 else 0.0 for weight in weights])
