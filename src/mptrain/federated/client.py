"""What one client does in a round, as plain functions: how many local steps it takes,
FedProx's proximal term, and whether its update may be averaged at all."""

from __future__ import annotations

import math
from typing import Sequence

import torch


def full_steps(samples: int, batch_size: int, local_epochs: int) -> int:
    """Local steps of a client that does all its work: ``local_epochs`` passes in batches."""
    return local_epochs * math.ceil(samples / batch_size)


def update_is_finite(update: torch.Tensor) -> bool:
    """Whether a client's result may be averaged: one NaN or infinity would poison every
    parameter it touches, so such a client is dropped and counted instead.

    A finite sum clears the update (any NaN or infinity makes the sum non-finite) at the
    cost of one pass and no mask; only an update whose sum is not finite -- a poisoned one,
    or finite values whose sum overflowed -- is looked at element by element. The stacked
    cohorts decide the same way (``cohorts.trainer.finite_clients``)."""
    if bool(torch.isfinite(update.sum())):
        return True
    return bool(torch.isfinite(update).all())


@torch.no_grad()
def add_proximal_gradient_(params: Sequence[torch.Tensor],
                           global_params: Sequence[torch.Tensor], mu: float,
                           scratch: Sequence[torch.Tensor] | None = None) -> None:
    """FedProx (Li et al. 2020): the gradient of ``mu/2 * ||w - w_global||^2`` added to each
    parameter's gradient, pulling a client's model towards the round's global model.

    ``scratch`` (a tensor shaped like each parameter) holds ``w - w_global`` so that a step
    allocates nothing; the arithmetic, and so every bit of the result, is the same.
    """
    buffers = scratch if scratch is not None else [None] * len(params)
    for param, anchor, buffer in zip(params, global_params, buffers):
        if param.grad is not None:
            param.grad.add_(torch.sub(param, anchor, out=buffer), alpha=mu)
