"""PPO's rollouts: an actor's ``gymnasium.vector`` environment played for one segment, and
the segments of all actors in shared memory, where the learner reads their union.

Each actor writes only its own slice of the shared tensors, and only between the two
barriers of an update (``ppo``): the learner reads them after the first barrier, when every
actor has written its segment, and no actor writes again before the second. The barriers
are semaphore operations, which order memory on every CPU (aarch64 included): no reader can
see a half-written segment.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import torch
import torch.nn.functional as F

from .acting import EpisodeTracker
from .envs import make_env
from .nets import flat_values
from .ppo_loss import segment_gae


@dataclass
class Segment:
    """One rollout: ``[steps, envs, ...]`` tensors (``[actors, steps, envs, ...]`` in the
    shared buffer), with what the policy saw and thought when it acted."""

    obs: torch.Tensor
    actions: torch.Tensor       # int64
    log_probs: torch.Tensor     # of the actions taken, under the acting policy
    values: torch.Tensor        # the acting value function's estimates
    advantages: torch.Tensor    # GAE
    returns: torch.Tensor       # advantages + values: the value function's targets

    def flat(self) -> "Segment":
        """Every transition in one dimension (the obs keep their last)."""
        return Segment(**{f.name: _flatten(getattr(self, f.name), f.name == "obs")
                          for f in fields(self)})

    def rows(self, index: torch.Tensor) -> "Segment":
        return Segment(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    def slice(self, start: int, stop: int) -> "Segment":
        """Rows ``start`` to ``stop`` (views, no copies)."""
        return Segment(**{f.name: getattr(self, f.name)[start:stop] for f in fields(self)})


def _flatten(tensor: torch.Tensor, keep_last: bool) -> torch.Tensor:
    return tensor.reshape(-1, tensor.shape[-1]) if keep_last else tensor.reshape(-1)


class SharedRollouts:
    """Every actor's segment of the current update, in shared memory."""

    def __init__(self, segments: Segment):
        self.segments = segments

    @classmethod
    def create(cls, actors: int, steps: int, envs: int, obs_dim: int) -> "SharedRollouts":
        shape = (actors, steps, envs)
        return cls(Segment(
            obs=torch.zeros(*shape, obs_dim).share_memory_(),
            actions=torch.zeros(shape, dtype=torch.int64).share_memory_(),
            **{name: torch.zeros(shape).share_memory_()
               for name in ("log_probs", "values", "advantages", "returns")}))

    @staticmethod
    def estimate_nbytes(actors: int, steps: int, envs: int, obs_dim: int) -> int:
        return actors * steps * envs * 4 * (obs_dim + 2 + 4)

    tensor_count = len(fields(Segment))

    def write(self, actor: int, segment: Segment) -> None:
        for f in fields(Segment):
            getattr(self.segments, f.name)[actor].copy_(getattr(segment, f.name))

    def union(self) -> Segment:
        """All actors' segments as one batch (a copy: the learner's own)."""
        return Segment(**{f.name: getattr(self.segments, f.name).clone()
                          for f in fields(Segment)}).flat()


class VectorActor:
    """A ``SyncVectorEnv`` of ``envs`` environments and the generator that samples their
    actions. An episode that ends is reset within the same step (``AutoresetMode.SAME_STEP``),
    so a segment has one observation per step and environment; a time limit (truncation)
    is not a terminal state: its reward gets ``gamma`` times the value of the state where it
    was cut, as stable-baselines3's PPO does."""

    def __init__(self, spec: str, envs: int, generator: torch.Generator, gamma: float,
                 gae_lambda: float):
        from gymnasium.vector import AutoresetMode, SyncVectorEnv

        self.env = SyncVectorEnv([lambda: make_env(spec) for _ in range(envs)],
                                 autoreset_mode=AutoresetMode.SAME_STEP)
        self.envs, self.generator = envs, generator
        self.gamma, self.gae_lambda = gamma, gae_lambda
        self.obs: np.ndarray | None = None
        self.trackers = [EpisodeTracker() for _ in range(envs)]

    def reset(self, seeds: list[int]) -> None:
        """Start a fresh episode in every environment, environment ``e`` seeded ``seeds[e]``
        (its action space too, for environments that sample it)."""
        self.obs, _ = self.env.reset(seed=seeds)
        for env, seed in zip(self.env.envs, seeds):
            env.action_space.seed(seed)
        for tracker in self.trackers:
            tracker.episode_return, tracker.episode_length = 0.0, 0

    @torch.inference_mode()   # no autograd bookkeeping for the acting policy's passes
    def collect(self, model, steps: int, advance=lambda steps: None) -> Segment:
        """``steps`` steps of every environment with ``model``'s stochastic policy."""
        obs_dim = self.obs.shape[-1]
        segment = Segment(obs=torch.empty(steps, self.envs, obs_dim),
                          actions=torch.empty(steps, self.envs, dtype=torch.int64),
                          log_probs=torch.empty(steps, self.envs),
                          values=torch.empty(steps, self.envs),
                          advantages=torch.empty(0), returns=torch.empty(0))
        rewards = torch.empty(steps, self.envs)
        dones = torch.empty(steps, self.envs, dtype=torch.bool)
        for t in range(steps):
            obs = torch.as_tensor(self.obs, dtype=torch.float32)
            logits, values = model(obs)
            log_probs = F.log_softmax(logits, -1)
            actions = torch.multinomial(log_probs.exp(), 1, generator=self.generator)
            self.obs, reward, terminated, truncated, info = self.env.step(
                actions.squeeze(1).numpy())
            reward = np.asarray(reward, dtype=np.float64)
            ended = np.logical_or(terminated, truncated)
            for tracker, r, end in zip(self.trackers, reward.tolist(), ended.tolist()):
                tracker.step(r, end)
            cut = np.logical_and(truncated, np.logical_not(terminated))
            if cut.any():   # bootstrap from the state where the time limit cut the episode
                final = torch.as_tensor(np.stack(info["final_obs"][cut]), dtype=torch.float32)
                reward[cut] += self.gamma * flat_values(model(final)[1]).double().numpy()
            segment.obs[t] = obs
            segment.actions[t] = actions.squeeze(1)
            segment.log_probs[t] = log_probs.gather(1, actions).squeeze(1)
            segment.values[t] = flat_values(values)
            rewards[t] = torch.from_numpy(reward)
            dones[t] = torch.from_numpy(ended)
            advance(self.envs)
        bootstrap = flat_values(model(torch.as_tensor(self.obs, dtype=torch.float32))[1])
        segment.advantages, segment.returns = segment_gae(
            rewards, segment.values, dones, bootstrap, self.gamma, self.gae_lambda)
        return segment

    def take_episodes(self) -> dict:
        """The episodes finished since the last call, over all environments."""
        taken = [tracker.take() for tracker in self.trackers]
        return {"returns": [r for t in taken for r in t["returns"]],
                "lengths": [n for t in taken for n in t["lengths"]]}

    def close(self) -> None:
        self.env.close()
