"""One optimizer step on one batch: the few lines every training loop of mptrain shares."""

from __future__ import annotations

from typing import Callable

import torch

from .task import loss_fn


def train_step(forward: Callable, optimizer: torch.optim.Optimizer, inputs: torch.Tensor,
               targets: torch.Tensor, task: str,
               after_backward: Callable[[], None] | None = None) -> torch.Tensor:
    """Zero the gradients, run ``forward`` and the task's loss, back-propagate, call
    ``after_backward`` (a strategy's gradient averaging, FedProx's proximal term), step.

    Returns the batch's mean loss, detached and still a tensor: no ``.item()``, so a GPU
    step does not wait for the device.
    """
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(task, forward(inputs), targets)
    loss.backward()
    if after_backward is not None:
        after_backward()
    optimizer.step()
    return loss.detach()


def first_nonfinite(losses: list[torch.Tensor]) -> int | None:
    """The index of the first non-finite loss (NaN or infinite) of a round's steps."""
    if not losses:
        return None
    bad = (~torch.isfinite(torch.stack(losses))).nonzero()
    return int(bad[0]) if len(bad) else None
