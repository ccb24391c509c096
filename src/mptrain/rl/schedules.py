"""Exploration schedule and target-network updates of DQN (pure functions)."""

from __future__ import annotations

import torch
import torch.nn as nn


def linear_epsilon(step: int, start: float, end: float, duration: int) -> float:
    """Epsilon after ``step`` environment steps: from ``start`` down to ``end`` in
    ``duration`` steps, then constant."""
    if duration <= 0 or step >= duration:
        return end
    return start + (end - start) * step / duration


@torch.no_grad()
def update_target(target: nn.Module, online: nn.Module, tau: float = 1.0) -> None:
    """target <- tau * online + (1 - tau) * target (tau=1: a hard copy)."""
    for t, o in zip(target.parameters(), online.parameters()):
        if tau >= 1.0:
            t.copy_(o)
        else:
            t.lerp_(o, tau)
    for t, o in zip(target.buffers(), online.buffers()):
        t.copy_(o)
