"""What every actor does the same way, whatever the algorithm: keep score of its episodes,
and play greedy evaluation episodes (plain functions and one small class)."""

from __future__ import annotations

import numpy as np
import torch

from .envs import make_env

#: Evaluation episode i is reset with seed EVAL_SEED + i, the same at every evaluation and
#: whatever the number of workers, so evaluations compare like with like.
EVAL_SEED = 1_000_000


class EpisodeTracker:
    """Returns and lengths of the episodes an actor finishes within one round."""

    def __init__(self):
        self.episode_return = 0.0
        self.episode_length = 0
        self.returns: list[float] = []
        self.lengths: list[int] = []

    def step(self, reward: float, ended: bool) -> None:
        self.episode_return += float(reward)
        self.episode_length += 1
        if ended:
            self.returns.append(self.episode_return)
            self.lengths.append(self.episode_length)
            self.episode_return, self.episode_length = 0.0, 0

    def take(self) -> dict:
        """This round's finished episodes (and forget them)."""
        done = {"returns": self.returns, "lengths": self.lengths}
        self.returns, self.lengths = [], []
        return done


def as_batch(obs) -> torch.Tensor:
    return torch.as_tensor(np.asarray(obs, dtype=np.float32)).unsqueeze(0)


@torch.no_grad()
def evaluate_greedy(greedy, env_spec: str, episodes: range, beat=lambda: None) -> list[float]:
    """Returns of evaluation ``episodes`` (indices) played with ``greedy(obs_batch) -> int``."""
    env = make_env(env_spec)
    returns = []
    try:
        for index in episodes:
            obs, _ = env.reset(seed=EVAL_SEED + index)
            total, ended = 0.0, False
            while not ended:
                obs, reward, terminated, truncated, _ = env.step(greedy(as_batch(obs)))
                total += float(reward)
                ended = terminated or truncated
            returns.append(total)
            beat()
    finally:
        env.close()
    return returns


def actor_seed(seed: int, rank: int, round_index: int) -> int:
    """The seed of an actor's first environment reset in a (re)started run."""
    return seed * 100_003 + rank * 1_009 + round_index * 7


def share_of(total: int, rank: int, world: int) -> int:
    """Rank ``rank``'s part of ``total`` items split as evenly as possible."""
    return total // world + (1 if rank < total % world else 0)
