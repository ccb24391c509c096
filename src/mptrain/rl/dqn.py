"""DQN made right, with parallel actors (one machine Ape-X, Horgan et al. 2018): N actor
processes step their own environments epsilon-greedily with the latest shared Q-network and
feed transitions through a replay buffer in shared memory; rank 0 is also the one learner
(double DQN targets from a target network, Huber loss, Adam).

The learner updates the shared Q-network in place while the other actors read it, without
a lock: an actor may pick one action from a half-updated network, which only changes which
exploratory step it takes (Ape-X actors likewise act with parameters some updates old).
The learner does one update per ``train_every`` transitions written by all actors, so the
replay ratio -- and with it the sample efficiency -- does not depend on the number of
actors; at the end of every round it catches up, so the updates done are a function of the
environment steps done. On a few CPU cores the actors are much faster than the learner, so
an actor waits while it is more than ``MAX_LAG`` updates' worth of transitions ahead:
otherwise it would fill the buffer with a policy thousands of updates old (measured: 1 of 4
seeds solved CartPole within 100k steps with free-running actors). The learner publishes
its update count in a one-number shared tensor that only it writes; an actor that reads a
stale count only waits a little longer.
"""

from __future__ import annotations

import copy
import time
from dataclasses import replace

import torch
import torch.nn.functional as F

from ..checkpoint import model_snapshot
from ..errors import UserError
from ..strategies.base import RoundWork
from .acting import EpisodeTracker, actor_seed, as_batch
from .driver import ActorProgram, ActorStrategy
from .envs import make_env
from .nets import QNetwork
from .replay import SharedReplay
from .schedules import linear_epsilon, update_target

MAX_LAG = 64       # learner updates an actor may run ahead of
WAIT_S = 0.0002    # an actor's pause while it waits for the learner


class DQNStrategy(ActorStrategy):
    name = "dqn"
    network = QNetwork   # built-in network, and the outputs a --net must give

    @classmethod
    def check_config(cls, config) -> None:
        if config.buffer_size // config.workers <= 256:
            raise UserError(f"--buffer-size {config.buffer_size} leaves too few rows per "
                            f"actor for {config.workers} workers; use at least "
                            f"{257 * config.workers}")

    def __init__(self, config):
        super().__init__(config)
        self.replay: SharedReplay | None = None
        self.learner_updates: torch.Tensor | None = None

    def prepare(self, model, data=None, plan=None) -> None:
        self.replay = SharedReplay.create(self.config.buffer_size, data.shape.obs_dim,
                                          self.config.workers)
        self.learner_updates = torch.zeros(1, dtype=torch.int64).share_memory_()

    def needs(self, model, data, plan):
        needs = super().needs(model, data, plan)
        replay = SharedReplay.estimate_nbytes(self.config.buffer_size, data.shape.obs_dim,
                                              self.config.workers)
        return replace(needs, shared_tensors=needs.shared_tensors + 7,
                       extra_shared_bytes=replay)

    def program(self, setup) -> "DQNProgram":
        return DQNProgram(setup, self.replay, self.learner_updates)

    def describe(self, plan, model) -> list[str]:
        c = self.config
        return [f"dqn: {plan.workers} actor(s), rank 0 also the learner; replay "
                f"{c.buffer_size:,} in shared memory, batch {c.batch_size}, 1 update per "
                f"{c.train_every} steps after {c.learning_starts:,}, target copied every "
                f"{c.target_every} updates, epsilon {c.eps_start:g}->{c.eps_end:g} over "
                f"{c.eps_steps:,} steps"]


class DQNProgram(ActorProgram):
    def __init__(self, setup, replay: SharedReplay, learner_updates: torch.Tensor):
        self.config, self.rank = setup.config, setup.group.rank
        self.model, self.progress, self.replay = setup.model, setup.progress, replay
        self.learner_updates = learner_updates   # written by the learner only
        self.learner = self.rank == 0
        if self.learner:
            self.target = copy.deepcopy(self.model)  # private: only the learner reads it
            for param in self.target.parameters():
                param.requires_grad_(False)
            self.optimizer = torch.optim.Adam(self.model.parameters(),
                                              lr=self.config.learning_rate)
            self.updates = 0
        self.generator = torch.Generator().manual_seed(self.config.seed * 7919 + self.rank)
        self.env = make_env(self.config.env, seed=actor_seed(self.config.seed, self.rank, 0))
        self.obs = None
        self.tracker = EpisodeTracker()

    def train_round(self, index: int) -> RoundWork:
        c = self.config
        if self.obs is None:  # a new or resumed run starts a fresh episode
            self.obs, _ = self.env.reset(seed=actor_seed(c.seed, self.rank, index))
        started = time.monotonic()
        end = c.round_end(index)
        steps, loss_sum, updates_before = 0, 0.0, self.updates if self.learner else 0
        while (total := self.replay.total()) < end:
            if not self.learner and self.ahead_of_learner(total):
                self.progress.beat()
                time.sleep(WAIT_S)
                continue
            epsilon = self.act(total)
            steps += 1
            if self.learner:
                # + 1: this actor's own transition; what the other actors wrote since
                # ``total`` was read counts from the next step on.
                loss_sum += self.learn_up_to(total + 1)
        if self.learner:
            loss_sum += self.learn_up_to(end)
        updates = self.updates - updates_before if self.learner else 0
        extras = {**self.tracker.take(), "env_steps": int(self.replay.counts[self.rank]),
                  "updates": updates}
        if steps:
            extras["epsilon"] = epsilon
        return RoundWork(steps=updates, samples=steps,
                         loss_sum=loss_sum / max(updates, 1) * steps,
                         started=started, ended=time.monotonic(), extras=extras)

    def act(self, total: int) -> float:
        """One epsilon-greedy step of this actor's environment into the replay buffer;
        ``total``: the transitions all actors have written (it sets epsilon)."""
        c = self.config
        epsilon = linear_epsilon(total, c.eps_start, c.eps_end, c.eps_steps)
        if float(torch.rand((), generator=self.generator)) < epsilon:
            action = int(torch.randint(self.env.action_space.n, (), generator=self.generator))
        else:
            action = self.greedy(as_batch(self.obs))
        next_obs, reward, terminated, truncated, _ = self.env.step(action)
        # A time limit (truncated) is not terminal: the target bootstraps from next_obs.
        self.replay.add(self.rank, self.obs, action, reward, next_obs, terminated)
        self.tracker.step(reward, terminated or truncated)
        self.obs = self.env.reset()[0] if terminated or truncated else next_obs
        self.progress.advance(1)
        return epsilon

    def ahead_of_learner(self, total: int) -> bool:
        c = self.config
        due = (total - c.learning_starts) // c.train_every
        return due > int(self.learner_updates[0]) + MAX_LAG

    def learn_up_to(self, total: int) -> float:
        """Updates until there is one per ``train_every`` transitions past
        ``learning_starts``; returns the sum of their losses."""
        c = self.config
        loss_sum = 0.0
        while (self.updates + 1) * c.train_every <= total - c.learning_starts:
            loss = self.update()
            if loss is None:
                break  # nothing readable yet (see SharedReplay.sample): catch up later
            loss_sum += loss
        return loss_sum

    def update(self) -> float | None:
        """One learner step; None when no row is readable yet: every actor has written
        fewer rows than the margin kept clear of its writes, which happens just past
        ``learning_starts`` when the actors' counts are close."""
        c = self.config
        batch = self.replay.sample(c.batch_size, self.generator)
        if batch is None:
            return None
        q = self.model(batch.obs).gather(1, batch.actions.unsqueeze(1)).squeeze(1)
        with torch.no_grad():  # double DQN: the online net picks, the target net values
            best = self.model(batch.next_obs).argmax(1, keepdim=True)
            next_q = self.target(batch.next_obs).gather(1, best).squeeze(1)
            target = batch.rewards + c.gamma * (1.0 - batch.dones) * next_q
        loss = F.smooth_l1_loss(q, target)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 10.0)
        self.optimizer.step()
        self.updates += 1
        self.learner_updates[0] = self.updates
        if self.updates % c.target_every == 0:
            update_target(self.target, self.model)
        return loss.item()

    @torch.no_grad()
    def greedy(self, obs: torch.Tensor) -> int:
        return int(self.model(obs).argmax(-1))

    def eval_model(self):
        return self.model

    def state(self) -> dict:
        state = {"rng": self.generator.get_state()}
        if self.learner:  # the learner's and the shared parts, once
            state.update(model=model_snapshot(self.model),
                         target=self.target.state_dict(), optimizer=self.optimizer.state_dict(),
                         updates=self.updates, replay=self.replay.state())
        return state

    def load_state(self, state: dict) -> None:
        if "rng" in state:
            self.generator.set_state(state["rng"])
        if self.learner and "replay" in state:
            self.target.load_state_dict(state["target"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.updates = state["updates"]
            self.learner_updates[0] = self.updates
            self.replay.load_state(state["replay"])
