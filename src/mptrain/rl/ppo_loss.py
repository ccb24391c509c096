"""PPO's losses and the advantages of a vector environment's segment (pure functions,
tested without processes). Schulman et al. 2017, in the form of CleanRL's ``ppo.py`` and
stable-baselines3's ``PPO.train``."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .nets import flat_values
from .returns import gae


def segment_gae(rewards: torch.Tensor, values: torch.Tensor, dones: torch.Tensor,
                bootstrap: torch.Tensor, gamma: float,
                lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns) of a ``[steps, envs]`` segment, each environment's column on
    its own: ``dones[t, e]`` ends environment ``e``'s episode at step ``t`` (nothing is
    added after it), ``bootstrap[e]`` is the value of its state after the last step."""
    advantages = torch.empty_like(values)
    for env in range(values.shape[1]):
        advantages[:, env] = gae(rewards[:, env], values[:, env], dones[:, env],
                                 float(bootstrap[env]), gamma, lam)[0]
    return advantages, advantages + values


def normalized(advantages: torch.Tensor) -> torch.Tensor:
    """Zero mean, unit standard deviation (the 1e-8 keeps a constant batch finite)."""
    return (advantages - advantages.mean()) / (advantages.std() + 1e-8)


def clipped_surrogate(ratio: torch.Tensor, advantages: torch.Tensor,
                      clip: float) -> torch.Tensor:
    """The policy loss: minus the mean of the pessimistic (smaller) of the surrogate
    ``ratio * A`` and its clipped form, so that moving the ratio beyond ``1 +- clip`` in
    the direction the advantage favours earns nothing (and has no gradient)."""
    unclipped = ratio * advantages
    clipped = ratio.clamp(1.0 - clip, 1.0 + clip) * advantages
    return -torch.min(unclipped, clipped).mean()


def value_loss(values: torch.Tensor, returns: torch.Tensor, old_values: torch.Tensor,
               clip: float | None) -> torch.Tensor:
    """Half the mean squared error to the returns; with ``clip``, the larger of that and
    the error of the value moved at most ``clip`` from the one the rollout saw (PPO2's
    value clipping)."""
    unclipped = (values - returns) ** 2
    if clip is None:
        return 0.5 * unclipped.mean()
    moved = old_values + (values - old_values).clamp(-clip, clip)
    return 0.5 * torch.max(unclipped, (moved - returns) ** 2).mean()


@dataclass(frozen=True)
class MinibatchLoss:
    loss: torch.Tensor          # what is differentiated
    policy: float
    value: float
    entropy: float
    approx_kl: float            # E[(ratio - 1) - log ratio] (Schulman's unbiased estimator)
    clip_fraction: float        # share of ratios outside 1 +- clip


def ppo_loss(model, obs, actions, old_log_probs, old_values, advantages, returns, *,
             clip: float, clip_value: bool, normalize: bool, entropy_coef: float,
             value_coef: float) -> MinibatchLoss:
    """PPO's loss on one minibatch of a rollout."""
    logits, values = model(obs)
    values = flat_values(values)
    log_probs = F.log_softmax(logits, -1)
    chosen = log_probs.gather(1, actions.unsqueeze(1)).squeeze(1)
    log_ratio = chosen - old_log_probs
    ratio = log_ratio.exp()
    if normalize and len(advantages) > 1:
        advantages = normalized(advantages)
    policy = clipped_surrogate(ratio, advantages, clip)
    value = value_loss(values, returns, old_values, clip if clip_value else None)
    # Without an entropy bonus (ppo's default) the entropy is only reported: kept out of
    # the graph, its backward pass is not paid for (the loss and gradients are the same
    # bit for bit: the term would add exact zeros).
    with torch.set_grad_enabled(torch.is_grad_enabled() and entropy_coef != 0):
        entropy = -(log_probs.exp() * log_probs).sum(-1).mean()
    loss = (policy - entropy_coef * entropy if entropy_coef != 0 else policy) \
        + value_coef * value
    with torch.no_grad():
        approx_kl = float(((ratio - 1) - log_ratio).mean())
        clip_fraction = float(((ratio - 1).abs() > clip).float().mean())
    return MinibatchLoss(loss, float(policy.detach()), float(value.detach()),
                         float(entropy.detach()), approx_kl,
                         clip_fraction)
