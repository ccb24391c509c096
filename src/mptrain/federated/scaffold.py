"""SCAFFOLD (Karimireddy et al. 2020), option II control variates.

The server keeps a control variate ``c`` and every client ``i`` its own ``c_i`` (zeros at
first; a client not sampled keeps its own). A client corrects every local gradient by
``c - c_i`` (the client drift), and after ``K`` local steps of learning rate ``lr`` from
``x`` to ``y`` sets ``c_i+ = c_i - c + (x - y) / (K * lr)`` and reports ``dc_i = c_i+ -
c_i`` with its model. The server moves ``c`` by ``sum(dc_i) / N`` over the ``N`` clients.
Variates cover the parameters (not buffers): they correct gradients.
"""

from __future__ import annotations

from typing import Sequence

import torch


@torch.no_grad()
def drift_correction(server_control: torch.Tensor, client_control: torch.Tensor,
                     out: torch.Tensor | None = None) -> torch.Tensor:
    """``c - c_i``: what a client adds to each local gradient."""
    return torch.sub(server_control, client_control, out=out)


@torch.no_grad()
def add_correction_(params: Sequence[torch.Tensor], corrections: Sequence[torch.Tensor]) -> None:
    """Add each parameter's slice of ``c - c_i`` to its gradient."""
    for param, correction in zip(params, corrections):
        if param.grad is not None:
            param.grad.add_(correction)


@torch.no_grad()
def update_client_control_(client_control: torch.Tensor, server_control: torch.Tensor,
                           start: torch.Tensor, end: torch.Tensor, steps: int, lr: float,
                           delta_out: torch.Tensor) -> None:
    """Option II: ``c_i <- c_i - c + (start - end) / (steps * lr)`` in place, and
    ``delta_out <- c_i+ - c_i`` (what the client reports). ``start``/``end``: the client's
    parameters before and after its local steps."""
    new = (start - end).div_(steps * lr).add_(client_control).sub_(server_control)
    torch.sub(new, client_control, out=delta_out)
    client_control.copy_(new)


@torch.no_grad()
def update_server_control_(server_control: torch.Tensor, delta_sum: torch.Tensor,
                           clients: int) -> None:
    """``c <- c + sum(dc_i) / N`` over the reported clients' ``dc_i``; ``N`` is every
    client, sampled or not."""
    server_control.add_(delta_sum, alpha=1.0 / clients)
