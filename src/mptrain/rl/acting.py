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


#: Evaluation environments stepped together at most (a rank's share of the episodes is
#: played in batches of this many): 100 episodes over 2 ranks are one batch each, and an
#: environment heavier than CartPole, or a very large --eval-episodes, still holds a
#: bounded number of environments at once.
EVAL_WIDTH = 64


@torch.inference_mode()
def evaluate_greedy(greedy_actions, env_spec: str, episodes: range,
                    beat=lambda: None) -> list[float]:
    """Returns of evaluation ``episodes`` (indices), in their order, played with
    ``greedy_actions(obs [n, obs_dim]) -> actions [n]``.

    The episodes are played side by side, one environment each (episode ``i`` reset with
    seed ``EVAL_SEED + i``), with one batched forward pass per step for all the episodes
    still running; an episode that ends leaves the batch, so each return is counted to its
    own end. The policy is deterministic and each environment has its own state, so every
    return is the one that episode has when played alone (a test checks it) -- up to
    last-bit ties: a batched matrix product may round a row's logits differently from a
    one-row one (measured: in the last bits of 136 of 186 rows), which flips an action only
    where two actions' logits tie to the last bit; a seed still names the evaluation, but
    ``--workers 1`` and ``2`` batch differently -- at one forward pass per step of the
    batch instead of one per step of each episode: 100
    episodes of CartPole near 500 were 50,000 forward passes, now 1,000 of 50 rows each.
    """
    returns = []
    for first in range(0, len(episodes), EVAL_WIDTH):
        returns += _play_side_by_side(greedy_actions, env_spec,
                                      episodes[first:first + EVAL_WIDTH], beat)
    return returns


def _play_side_by_side(greedy_actions, env_spec: str, episodes: range, beat) -> list[float]:
    envs = []
    try:
        for _ in episodes:
            envs.append(make_env(env_spec))
        obs = [env.reset(seed=EVAL_SEED + index)[0] for env, index in zip(envs, episodes)]
        totals = [0.0] * len(envs)
        running = list(range(len(envs)))   # the episodes not ended, by position
        while running:
            actions = greedy_actions(torch.as_tensor(
                np.asarray([obs[i] for i in running], dtype=np.float32))).tolist()
            still = []
            for i, action in zip(running, actions):
                obs[i], reward, terminated, truncated, _ = envs[i].step(action)
                totals[i] += float(reward)
                if terminated or truncated:
                    beat()   # a long evaluation is progress too, not a hang
                else:
                    still.append(i)
            running = still
    finally:
        for env in envs:
            env.close()
    return totals


def actor_seed(seed: int, rank: int, round_index: int) -> int:
    """The seed of an actor's first environment reset in a (re)started run."""
    return seed * 100_003 + rank * 1_009 + round_index * 7


def share_of(total: int, rank: int, world: int) -> int:
    """Rank ``rank``'s part of ``total`` items split as evenly as possible."""
    return total // world + (1 if rank < total % world else 0)
