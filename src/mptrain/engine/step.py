"""One optimizer step on one batch: the few lines every training loop of mptrain shares."""

from __future__ import annotations

from typing import Callable

import torch

from .task import loss_fn


def train_step(forward: Callable, optimizer: torch.optim.Optimizer, inputs: torch.Tensor,
               targets: torch.Tensor, task: str,
               after_backward: Callable[[], None] | None = None,
               clock=None) -> torch.Tensor:
    """Zero the gradients, run ``forward`` and the task's loss, back-propagate, call
    ``after_backward`` (a strategy's gradient averaging, FedProx's proximal term), step.
    ``clock`` (an ``engine.profile.RoundClock``) times the forward pass, the backward pass
    and the optimizer's step as parts of compute.

    Returns the batch's mean loss, detached and still a tensor: no ``.item()``, so a GPU
    step does not wait for the device.
    """
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(task, forward(inputs), targets)
    _lap(clock, "forward")
    loss.backward()
    _lap(clock, "backward")
    if after_backward is not None:
        after_backward()   # timed by its caller's wrapper (a collective), outside the laps
    optimizer.step()
    _lap(clock, "optimizer")
    return loss.detach()


def _lap(clock, part: str) -> None:
    if clock is not None:
        clock.lap_part(part)


def first_nonfinite(losses: list[torch.Tensor]) -> int | None:
    """The index of the first non-finite loss (NaN or infinite) of a round's steps."""
    if not losses:
        return None
    bad = (~torch.isfinite(torch.stack(losses))).nonzero()
    return int(bad[0]) if len(bad) else None
