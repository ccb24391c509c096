"""A model's state as the strategies move it between models and processes: the floating
tensors that averaging touches, and a whole copy from one model into another."""

from __future__ import annotations

import torch
import torch.nn as nn


def floating_state(model: nn.Module) -> list[torch.Tensor]:
    """Parameters and floating-point buffers (BatchNorm statistics): what averaging touches.

    Integer buffers (``num_batches_tracked``) are equal on every rank in synchronous
    strategies, since every rank takes the same number of steps.
    """
    tensors = [p.data for p in model.parameters()]
    tensors += [b for b in model.buffers() if b.is_floating_point()]
    return tensors


@torch.no_grad()
def copy_model_state(source: nn.Module, target: nn.Module) -> None:
    for mine, theirs in zip(source.state_dict().values(), target.state_dict().values()):
        theirs.copy_(mine)
