"""What a dqn update learns towards: n-step returns drawn from the one-step replay buffer,
the double-DQN value they bootstrap from, and advantage learning's widened action gap.

Why these exist (docs/rl.md, "Holding what dqn learned"): once CartPole is solved, both
actions' values are ~1/(1 - gamma) in almost every state and differ only by when an
episode would end, hundreds of steps later, so the greedy argmax follows small errors.

- **n-step returns** (``return_steps``; Rainbow uses 3, Hessel et al. 2018): the target sums
  ``n`` rewards before it bootstraps, so a failure reaches ``n`` times further back per
  update and the target leans less on the network's own (biased) values. The buffer keeps
  one-step rows; the ``n`` steps are gathered when a batch is drawn, by global step: step
  ``g``'s next one in its episode is ``g + actors`` (the same actor). A return stops early
  at an episode's end (a time limit too: it then bootstraps from where it was cut) and at
  the update's window end, the first step it may not draw from -- so what an update learns
  is fixed by step counts, as everything in dqn is, and needs no row not yet due.
- **advantage learning** (``advantage_learning`` alpha; Bellemare et al. 2016, "Increasing
  the action gap"): the target of a non-greedy action is lowered by alpha times its gap to
  the greedy one (under the target network), which widens the learned gaps by about
  ``1 / (1 - alpha)`` without changing which action is greedy.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from .replay import Batch, SharedReplay


def sample_n_step(replay: SharedReplay, first: int, end: int, batch_size: int,
                  generator: torch.Generator, n: int, gamma: float) -> Batch:
    """``batch_size`` steps drawn uniformly from global steps ``[first, end)`` (the same
    draws as ``replay.sample``), each with the discounted sum of up to ``n`` rewards of its
    episode from there on, the observation to bootstrap from after them, whether the last
    of them terminated, and ``gamma ** k`` for the ``k`` rewards summed."""
    steps = torch.randint(first, end, (batch_size,), generator=generator)
    rows = replay.rows_of(steps)
    returns = replay.rewards[rows]
    discounts = torch.full((batch_size,), gamma)
    last = rows
    going = ~replay.ends[rows]
    for k in range(1, n):
        later = steps + k * replay.actors          # the same actor's k-th next step
        going = going & (later < end)
        later_rows = replay.rows_of(torch.where(going, later, steps))
        returns = torch.where(going, returns + discounts * replay.rewards[later_rows], returns)
        discounts = torch.where(going, discounts * gamma, discounts)
        last = torch.where(going, later_rows, last)
        going = going & ~replay.ends[later_rows]
    return Batch(replay.obs[rows], replay.actions[rows], returns, replay.next_obs[last],
                 replay.dones[last], discounts)


@torch.no_grad()
def double_dqn_targets(online: nn.Module, target: nn.Module, batch: Batch, gamma: float,
                       advantage_learning: float = 0.0) -> torch.Tensor:
    """Double DQN's targets (the online network picks the next action, the target network
    values it), minus ``advantage_learning`` times the taken action's gap to the greedy
    one under the target network when that is above 0."""
    best = online(batch.next_obs).argmax(1, keepdim=True)
    next_q = target(batch.next_obs).gather(1, best).squeeze(1)
    discount = gamma if batch.discounts is None else batch.discounts
    targets = batch.rewards + discount * (1.0 - batch.dones) * next_q
    if advantage_learning > 0.0:
        q = target(batch.obs)
        gap = q.max(1).values - q.gather(1, batch.actions.unsqueeze(1)).squeeze(1)
        targets = targets - advantage_learning * gap
    return targets


def target_kind(config) -> str:
    """What the targets are beyond one-step double DQN, for the banner ("" if nothing)."""
    words = ([f"{config.return_steps}-step returns"] if config.return_steps > 1 else []) + \
        ([f"advantage learning {config.advantage_learning:g}"]
         if config.advantage_learning else [])
    return "".join(f"{w}, " for w in words)
