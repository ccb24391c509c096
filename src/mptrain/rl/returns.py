"""Returns and advantages of a rollout (pure functions, tested without processes).

A rollout is T consecutive steps of one environment: ``rewards[t]``, ``dones[t]`` (the
episode *terminated* at step t: no value after it) and the value estimate of the state
after the last step (``bootstrap``). A *truncated* episode (time limit) is not terminal:
the actor bootstraps from the value of the state where it was cut, so it passes that
value in ``cut_values`` and marks ``cuts[t]``.
"""

from __future__ import annotations

from typing import Sequence

import torch


def nstep_returns(rewards: torch.Tensor, dones: torch.Tensor, bootstrap: float,
                  gamma: float, cuts: torch.Tensor | None = None,
                  cut_values: torch.Tensor | None = None) -> torch.Tensor:
    """Discounted n-step returns G_t = r_t + gamma * G_{t+1}, restarted at episode ends."""
    returns = torch.empty_like(rewards)
    running = float(bootstrap)
    for t in range(len(rewards) - 1, -1, -1):
        if dones[t]:
            running = 0.0
        elif cuts is not None and cuts[t]:
            running = float(cut_values[t])
        running = float(rewards[t]) + gamma * running
        returns[t] = running
    return returns


def gae(rewards: Sequence[float], values: torch.Tensor, dones: Sequence[bool],
        bootstrap: float, gamma: float, lam: float, cuts: Sequence[bool] | None = None,
        cut_values: Sequence[float] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation (Schulman et al. 2016); returns (advantages,
    returns = advantages + values), both of ``values``' dtype. ``lam=1`` gives the n-step
    advantage of A3C. The sequences may be tensors or lists."""
    # Python floats, read once: indexing a tensor element by element costs microseconds.
    rewards, value_list, dones = _listed(rewards), values.tolist(), _listed(dones)
    cuts = _listed(cuts) if cuts is not None else [False] * len(rewards)
    cut_values = _listed(cut_values) if cut_values is not None else None
    last = len(rewards) - 1
    advantages = [0.0] * len(rewards)
    running = 0.0
    for t in range(last, -1, -1):
        if dones[t]:
            next_value, running = 0.0, 0.0
        elif cuts[t]:
            next_value, running = float(cut_values[t]), 0.0
        elif t == last:
            next_value = float(bootstrap)
        else:
            next_value = value_list[t + 1]
        delta = float(rewards[t]) + gamma * next_value - value_list[t]
        running = delta + gamma * lam * running
        advantages[t] = running
    result = torch.tensor(advantages, dtype=values.dtype)
    return result, result + values


def _listed(sequence) -> list:
    return sequence.tolist() if isinstance(sequence, torch.Tensor) else sequence
