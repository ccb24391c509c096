"""Running a forward pass in the run's precision: bfloat16 under ``torch.autocast`` with the
output back in float32 (``in_precision``), or a module that enters autocast in its own
forward (``autocast_module``, for ``nn.DataParallel``'s replica threads). Why bfloat16, and
what stays float32: ``engine.precision``."""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn

from .precision import FULL


def in_precision(forward: Callable, precision: str, device: torch.device) -> Callable:
    """``forward`` run under autocast for ``precision`` (the same function for ``32``).

    The output comes back as float32, so the loss and its reduction are computed in full
    precision whatever the last layer's dtype.
    """
    if precision == FULL:
        return forward
    device_type = device.type

    def forward_in_bfloat16(inputs: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device_type=device_type, dtype=torch.bfloat16):
            output = forward(inputs)
        return output.float()

    return forward_in_bfloat16


class AutocastModule(nn.Module):
    """``module`` whose own forward runs under bfloat16 autocast. ``nn.DataParallel`` runs
    each replica in a thread of its own, which inherits whether autocast is on but not its
    dtype (float16 on CUDA unless set): autocast must be entered inside the replica."""

    def __init__(self, module: nn.Module, device_type: str):
        super().__init__()
        self.module, self.device_type = module, device_type

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device_type=self.device_type, dtype=torch.bfloat16):
            return self.module(inputs)


def autocast_module(module: nn.Module, precision: str, device_type: str) -> nn.Module:
    """``module`` itself for ``32``, else wrapped to enter autocast in its own forward."""
    return module if precision == FULL else AutocastModule(module, device_type)


def without_autocast_module(module: nn.Module) -> nn.Module:
    return module.module if isinstance(module, AutocastModule) else module
