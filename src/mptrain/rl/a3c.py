"""A3C (Mnih et al. 2016): N actor-learners, each with its own environment, computing
n-step advantage actor-critic gradients and applying them lock-free to one shared model
with a shared-statistics optimizer (Adam whose moments and step live in shared memory).

Every actor acts and learns on the shared parameters themselves, as Hogwild does;
gradients are allocated lazily by autograd inside each actor, so they stay private, and
only the optimizer's state is shared (``strategies.hogwild.shared_optimizer_state``).
"""

from __future__ import annotations

import time
from dataclasses import replace

import torch
import torch.nn.functional as F

from ..checkpoint import model_snapshot
from ..engine.step import step_on_loss
from ..strategies.base import RoundWork
from ..strategies.hogwild import (attach_shared_state, load_shared_state,
                                  shared_optimizer_state)
from .acting import EpisodeTracker, actor_seed, as_batch, share_of
from .base import ActorProgram, ActorStrategy
from .envs import make_env
from .nets import ActorCritic, flat_values
from .plain_adam import PlainAdam
from .returns import gae


class A3CStrategy(ActorStrategy):
    name = "a3c"
    builds_torch_optimizer = False   # the actor-learners' Adam is plain_adam's
    network = ActorCritic   # built-in network, and the outputs a --net must give
    default_lr = 1e-3
    default_hidden = 128

    def __init__(self, config):
        super().__init__(config)
        self.optimizer_state: list[dict] | None = None

    def prepare(self, model, data=None, plan=None) -> None:
        super().prepare(model, data, plan)
        self.optimizer_state = shared_optimizer_state(list(model.parameters()), "adam", 0.0)

    def needs(self, model, data, plan):
        needs = super().needs(model, data, plan)
        return replace(needs, shared_tensors=needs.shared_tensors
                       + 3 * len(list(model.parameters())))

    def program(self, setup) -> "A3CProgram":
        return A3CProgram(setup, self.optimizer_state)

    def describe(self, plan, model) -> list[str]:
        c = self.config
        return [f"a3c: {plan.workers} actor-learner(s), {c.n_steps}-step advantage "
                f"actor-critic (lambda {c.gae_lambda:g}), entropy {c.entropy_coef:g}; "
                "lock-free updates to the shared model, Adam state shared"]


class A3CProgram(ActorProgram):
    def __init__(self, setup, optimizer_state: list[dict]):
        self.config, self.rank, self.world = setup.config, setup.group.rank, \
            setup.group.world_size
        self.model, self.progress = setup.model, setup.progress
        self.optimizer = PlainAdam(self.model.parameters(), lr=self.config.learning_rate)
        self.shared_state = optimizer_state
        attach_shared_state(self.optimizer, self.model.parameters(), optimizer_state)
        self.generator = torch.Generator().manual_seed(self.config.seed * 7919 + self.rank)
        self.env = make_env(self.config.env, seed=actor_seed(self.config.seed, self.rank, 0))
        self.obs = None
        self.tracker = EpisodeTracker()
        self.env_steps = 0      # this actor's, since the run began

    def train_round(self, index: int) -> RoundWork:
        c = self.config
        if self.obs is None:  # a new or resumed run starts a fresh episode
            self.obs, _ = self.env.reset(seed=actor_seed(c.seed, self.rank, index))
        started = time.monotonic()
        steps = todo = share_of(c.round_size(index), self.rank, self.world)
        updates, loss_sum = 0, 0.0
        while todo > 0:
            length = min(c.n_steps, todo)
            loss_sum += self.rollout_and_update(length)
            updates += 1
            todo -= length
        ended = time.monotonic()
        return RoundWork(steps=updates, samples=steps,
                         loss_sum=loss_sum / max(updates, 1) * steps,
                         started=started, ended=ended,
                         extras={**self.tracker.take(), "env_steps": self.env_steps,
                                 "updates": updates})

    def rollout_and_update(self, length: int) -> float:
        """Act ``length`` steps with the current shared policy, then one update; returns the
        loss."""
        c = self.config
        observations, actions, rewards = [], [], []
        dones, cuts, cut_values = [False] * length, [False] * length, [0.0] * length
        for t in range(length):
            obs = as_batch(self.obs)
            with torch.no_grad():
                logits, _ = self.model(obs)
                action = int(torch.multinomial(F.softmax(logits, -1), 1,
                                               generator=self.generator))
            self.obs, reward, terminated, truncated, _ = self.env.step(action)
            observations.append(obs)
            actions.append(action)
            rewards.append(float(reward))
            self.tracker.step(reward, terminated or truncated)
            if terminated:
                dones[t] = True
            elif truncated:  # a time limit, not a terminal state: bootstrap from it
                cuts[t] = True
                with torch.no_grad():
                    cut_values[t] = self.model(as_batch(self.obs))[1].item()
            if terminated or truncated:
                self.obs, _ = self.env.reset()
        self.env_steps += length
        self.progress.advance(length)

        logits, values = self.model(torch.cat(observations))
        values = flat_values(values)   # a value head of (N, 1) too
        with torch.no_grad():
            bootstrap = 0.0 if dones[-1] or cuts[-1] else \
                self.model(as_batch(self.obs))[1].item()
        # Rewards rounded to float32, like the values, before gae adds them up in float64.
        advantages, returns = gae(torch.tensor(rewards), values.detach(), dones, bootstrap,
                                  c.gamma, c.gae_lambda, cuts, cut_values)
        log_probs = F.log_softmax(logits, -1)
        chosen = log_probs.gather(1, torch.tensor(actions).unsqueeze(1)).squeeze(1)
        entropy = -(log_probs.exp() * log_probs).sum(-1)
        loss = -(chosen * advantages).mean() - c.entropy_coef * entropy.mean() \
            + c.value_coef * F.mse_loss(values, returns)
        # lock-free, into the shared parameters and Adam state
        step_on_loss(self.optimizer, loss, max_grad_norm=c.max_grad_norm)
        return loss.item()

    def greedy_actions(self, obs: torch.Tensor) -> torch.Tensor:
        return self.model(obs)[0].argmax(-1)

    def eval_model(self):
        return self.model

    def close(self) -> None:
        self.env.close()

    def state(self) -> dict:
        state = {"rng": self.generator.get_state(), "env_steps": self.env_steps}
        if self.rank == 0:  # the shared parts, once
            state["model"] = model_snapshot(self.model)
            state["optimizer"] = [{k: v.clone() for k, v in s.items()}
                                  for s in self.shared_state]
        return state

    def load_state(self, state: dict) -> None:
        if "rng" in state:
            self.generator.set_state(state["rng"])
        self.env_steps = state.get("env_steps", 0)
        if self.rank == 0 and "optimizer" in state:
            load_shared_state(self.shared_state, state["optimizer"])
