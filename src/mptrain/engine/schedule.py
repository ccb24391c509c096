"""Learning-rate schedules as pure functions of (epoch, step): resumable, no hidden state."""

from __future__ import annotations

import math

def learning_rate(schedule: str, base_lr: float, decay: float, epoch: int, step: int,
                  steps_in_epoch: int) -> float:
    """``step``: ``base_lr * decay**epoch``, constant within an epoch.
    ``cosine``: the same peak per epoch, annealed to zero along a half cosine within each
    epoch (SGDR-style warm restarts), so every epoch ends on a settled model."""
    peak = base_lr * decay ** epoch
    if schedule == "step" or steps_in_epoch <= 1:
        return peak
    return peak * 0.5 * (1 + math.cos(math.pi * step / steps_in_epoch))
