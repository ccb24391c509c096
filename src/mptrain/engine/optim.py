"""Optimizers by name, built the same way in every process."""

from __future__ import annotations

import torch


def build_optimizer(params, name: str, lr: float, momentum: float,
                    weight_decay: float) -> torch.optim.Optimizer:
    params = list(params)
    if name == "sgd":
        return _fused_where_supported(torch.optim.SGD, params, lr=lr, momentum=momentum,
                                      weight_decay=weight_decay)
    if name == "adam":
        # `momentum` is Adam's beta1 when the user sets it; 0.9 is Adam's own default.
        beta1 = momentum if momentum else 0.9
        return _fused_where_supported(torch.optim.Adam, params, lr=lr, betas=(beta1, 0.999),
                                      weight_decay=weight_decay)
    raise ValueError(f"unknown optimizer {name!r}")


def fresh_scalar_state(name: str) -> dict:
    """The optimizer's scalar state of a parameter not stepped yet (Adam's ``step`` count):
    what goes beside :func:`state_like_params`' tensors when the state is laid out by hand."""
    return {"step": torch.tensor(0.0)} if name == "adam" else {}


def state_like_params(name: str, momentum: float) -> tuple[str, ...]:
    """The optimizer's per-parameter state tensors shaped like the parameter (Adam also keeps
    a scalar ``step``): what strategies that keep the state in shared memory lay out, and
    what a rank holds per parameter when it keeps its own."""
    if name == "sgd":
        return ("momentum_buffer",) if momentum else ()
    if name == "adam":
        return ("exp_avg", "exp_avg_sq")
    raise ValueError(f"unknown optimizer {name!r}")


def _fused_where_supported(optimizer_class, params, **settings) -> torch.optim.Optimizer:
    """The fused (one kernel for all parameters) update where torch has one for these
    parameters: CPU since torch 2.4, CUDA earlier.

    With a small model the per-parameter update is mostly Python and dispatch: Adam's step
    took 0.53 ms of a 7.9 ms MNIST CNN step on one core here, the fused one 0.31 ms.
    """
    try:
        return optimizer_class(params, fused=True, **settings)
    except (RuntimeError, ValueError, TypeError):  # no fused kernel for these params here
        return optimizer_class(params, **settings)
