"""One optimizer step: the few lines every training loop of mptrain shares, supervised
(``train_step``, from a batch) and RL (``step_on_loss``, from a loss the algorithm made)."""

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
    loss = loss_fn(task, forward(inputs), targets)
    _lap(clock, "forward")
    step_on_loss(optimizer, loss, after_backward=after_backward, clock=clock)
    return loss.detach()


def step_on_loss(optimizer: torch.optim.Optimizer, loss: torch.Tensor,
                 after_backward: Callable[[], None] | None = None,
                 max_grad_norm: float | None = None, clock=None) -> None:
    """Zero the gradients, back-propagate ``loss``, call ``after_backward``, clip the
    gradients of the optimizer's parameters to a total norm of ``max_grad_norm``, step.
    (Zeroing after the forward pass is the same as before it: a forward pass does not touch
    gradients.)"""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    _lap(clock, "backward")
    if after_backward is not None:
        after_backward()   # timed by its caller's wrapper (a collective), outside the laps
    if max_grad_norm is not None:
        torch.nn.utils.clip_grad_norm_(
            [p for group in optimizer.param_groups for p in group["params"]], max_grad_norm)
    optimizer.step()
    _lap(clock, "optimizer")


def _lap(clock, part: str) -> None:
    if clock is not None:
        clock.lap_part(part)


def first_nonfinite(losses: list[torch.Tensor]) -> int | None:
    """The index of the first non-finite loss (NaN or infinite) of a round's steps."""
    if not losses:
        return None
    bad = (~torch.isfinite(torch.stack(losses))).nonzero()
    return int(bad[0]) if len(bad) else None
