"""Optimizers by name, built the same way in every process."""

from __future__ import annotations

import torch


def build_optimizer(params, name: str, lr: float, momentum: float,
                    weight_decay: float) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    if name == "adam":
        # `momentum` is Adam's beta1 when the user sets it; 0.9 is Adam's own default.
        beta1 = momentum if momentum else 0.9
        return torch.optim.Adam(params, lr=lr, betas=(beta1, 0.999), weight_decay=weight_decay)
    raise ValueError(f"unknown optimizer {name!r}")
