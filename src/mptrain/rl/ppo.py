"""PPO (Schulman et al. 2017) with parallel actors on vectorized environments, where a seed
names a run.

Every one of the ``--workers`` processes is an actor stepping a ``gymnasium.vector``
environment of ``--envs-per-actor`` environments; rank 0 is also the learner. PPO is
on-policy, so the rollouts are synchronous: in each update every actor plays a segment of
``--n-steps`` steps per environment with the same policy, the current shared network;
after a barrier, the learner runs ``--update-epochs`` passes of minibatch steps
(``--batch-size`` transitions each) over the union of the segments, on that shared
network; after a second barrier the actors play the next segment with the updated one.
Nobody writes the network while an actor acts with it, so the actors read the shared
parameters directly: no published copy (``published``, which DQN's actors need because
they act while its learner learns) is needed.

Everything is fixed by the seed and the counts: the initial network, each environment's
seed (from its global index), each actor's generator for sampling actions, and the
learner's generator for shuffling minibatches; the actors' segments are put together in
the order of their ranks, whatever order they finish in. Two runs with the same settings
give the same learning curve bit for bit.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import replace

import torch

from ..checkpoint import model_snapshot
from ..errors import UserError, setting_name
from ..strategies.base import RoundWork
from ..strategies.model_state import copy_model_state
from .acting import actor_seed
from .base import ActorProgram, ActorStrategy
from .flat_adam import FlatAdam
from .nets import SeparateActorCritic
from .ppo_loss import ppo_loss
from .ppo_rollout import SharedRollouts, VectorActor

#: Adam's epsilon of CleanRL's and stable-baselines3's PPO (torch's default is 1e-8).
ADAM_EPS = 1e-5


def rollout_size(config) -> int:
    """Transitions in one update's batch: every actor's segment."""
    return config.workers * config.envs_per_actor * config.n_steps


def minibatch_size(config) -> int:
    """Transitions per gradient step: ``batch_size``, or the whole rollout where that is
    smaller (a default of 256 with one actor on one environment)."""
    return min(config.batch_size, rollout_size(config))


def updates_by(config, steps: int) -> int:
    """Updates done once ``steps`` environment steps are due: whole rollouts, rounded up."""
    return math.ceil(steps / rollout_size(config))


def rounded_rounds(config) -> list[str]:
    """The banner's word on rounds that end at whole rollouts (``--round-steps 5000``
    shown as rounds of 5,120 steps, unexplained, before): [] where they need none."""
    size = rollout_size(config)
    if config.round_steps % size == 0:
        return []
    ends = updates_by(config, config.round_steps) * size
    return [f"rounds end at whole rollouts of {size:,} transitions: "
            f"{setting_name('round_steps')} {config.round_steps} gives rounds of about {ends:,} "
            "steps"]


class PPOStrategy(ActorStrategy):
    name = "ppo"
    network = SeparateActorCritic   # built-in network; a --net returns what a3c's does
    default_lr = 2e-3   # the zoo's 1e-3 doubled for half its epochs: docs/rl.md, "ppo"
    default_hidden = 64
    builds_torch_optimizer = False   # the learner's Adam is flat_adam's

    @classmethod
    def check_config(cls, config) -> None:
        size = rollout_size(config)
        if config.round_steps < size:   # a round would hold no update
            named = setting_name   # as the caller spelled each setting
            raise UserError(
                f"{named('round_steps')} {config.round_steps} is smaller than one ppo rollout "
                f"({size} = {named('workers')} {config.workers} x {named('envs_per_actor')} "
                f"{config.envs_per_actor} x {named('n_steps')} {config.n_steps}); give at "
                f"least {size}")

    @classmethod
    def check_checkpoint(cls, checkpoint) -> None:
        if checkpoint.ranks and "updates_done" not in checkpoint.ranks[0]:
            raise UserError("this ppo checkpoint lacks the learner's state; start a new run")

    @classmethod
    def check_resume(cls, config, checkpoint) -> None:
        # Updates are counted in whole rollouts and the learning rate anneals by them: a
        # rollout of another size would run the wrong number of updates from here on.
        for name in ("n_steps", "envs_per_actor"):
            saved = checkpoint.config.get(name)
            if saved is not None and saved != getattr(config, name):
                raise UserError(
                    f"{setting_name(name)} {getattr(config, name)} differs from the "
                    f"checkpoint's {saved}: a ppo run resumes with the rollout it was "
                    f"counted in; give {setting_name(name)} {saved} or start a new run")

    def __init__(self, config):
        super().__init__(config)
        self.rollouts: SharedRollouts | None = None

    def prepare(self, model, data=None, plan=None) -> None:
        super().prepare(model, data, plan)
        c = self.config
        self.rollouts = SharedRollouts.create(c.workers, c.n_steps, c.envs_per_actor,
                                              data.shape.obs_dim)

    def needs(self, model, data, plan):
        needs = super().needs(model, data, plan)
        c = self.config
        return replace(needs, shared_tensors=needs.shared_tensors + SharedRollouts.tensor_count,
                       extra_shared_bytes=needs.extra_shared_bytes
                       + SharedRollouts.estimate_nbytes(c.workers, c.n_steps,
                                                        c.envs_per_actor, data.shape.obs_dim))

    def program(self, setup) -> "PPOProgram":
        return PPOProgram(setup, self.rollouts)

    def describe(self, plan, model) -> list[str]:
        c = self.config
        return [f"ppo: {plan.workers} actor(s) x {c.envs_per_actor} envs x {c.n_steps} "
                f"steps = {rollout_size(c):,} transitions per update, rank 0 the learner: "
                f"{c.update_epochs} epochs of minibatches of {minibatch_size(c)}, clip "
                f"{c.clip_coef:g}, GAE lambda {c.gae_lambda:g}, entropy {c.entropy_coef:g}"
                + (", learning rate annealed" if c.anneal_lr else "")] \
            + rounded_rounds(c)


class PPOProgram(ActorProgram):
    def __init__(self, setup, rollouts: SharedRollouts):
        c = self.config = setup.config
        self.rank, self.group = setup.group.rank, setup.group
        self.model, self.progress, self.rollouts = setup.model, setup.progress, rollouts
        self.learner = self.rank == 0
        self.actor = VectorActor(c.env, c.envs_per_actor,
                                 torch.Generator().manual_seed(c.seed * 7919 + self.rank),
                                 c.gamma, c.gae_lambda)
        self.fresh = True           # a new or resumed run starts fresh episodes
        self.env_steps = 0          # this actor's, since the run began
        self.updates_done = 0       # the run's, the same count in every rank
        if self.learner:
            # The learner steps a private copy whose parameters lie in one flat tensor
            # (``flat_adam``), and writes it into the shared network after each update.
            self.net = copy.deepcopy(self.model)
            self.optimizer = FlatAdam(self.net, lr=c.learning_rate, eps=ADAM_EPS)
            self.shuffler = torch.Generator().manual_seed(c.seed * 7919 + 104_729)

    def train_round(self, index: int) -> RoundWork:
        c = self.config
        if self.fresh:
            first = self.rank * c.envs_per_actor   # global index of this actor's first env
            self.actor.reset([actor_seed(c.seed, first + e, index)
                              for e in range(c.envs_per_actor)])
            self.fresh = False
        started = time.monotonic()
        steps, stats = 0, []
        while self.updates_done < updates_by(c, c.round_end(index)):
            segment = self.actor.collect(self.model, c.n_steps, self.progress.advance)
            self.rollouts.write(self.rank, segment)
            steps += c.n_steps * c.envs_per_actor
            self.group.barrier()     # every segment of this policy is in
            if self.learner:
                stats.append(self.update())
            self.group.barrier()     # the next policy is in the shared network
            self.updates_done += 1
        self.env_steps += steps
        extras = {**self.actor.take_episodes(), "env_steps": self.env_steps,
                  "updates": sum(s["minibatches"] for s in stats)}
        loss_sum = 0.0
        if stats:
            # The run's loss is the reports' loss sums over its samples: the learner's mean
            # minibatch loss, weighted by the round's steps of all actors.
            loss_sum = sum(s["loss"] for s in stats) / len(stats) * steps * c.workers
            for key in ("approx_kl", "clip_fraction", "entropy", "value_loss"):
                extras[key] = sum(s[key] for s in stats) / len(stats)
        return RoundWork(steps=extras["updates"], samples=steps, loss_sum=loss_sum,
                         started=started, ended=time.monotonic(), extras=extras)

    def update(self) -> dict:
        """The learner's PPO update on every actor's segment; the means of its minibatches'
        figures."""
        c = self.config
        if c.anneal_lr:
            total = updates_by(c, c.steps)
            self.optimizer.lr = c.learning_rate * (1.0 - self.updates_done / total)
        batch = self.rollouts.union()
        size, minibatch = len(batch.actions), minibatch_size(c)
        figures = []
        for _ in range(c.update_epochs):
            # One gather per epoch; its minibatches are then slices (views), the same rows
            # as gathering each minibatch's part of the permutation.
            shuffled = batch.rows(torch.randperm(size, generator=self.shuffler))
            for start in range(0, size, minibatch):
                rows = shuffled.slice(start, start + minibatch)
                loss = ppo_loss(self.net, rows.obs, rows.actions, rows.log_probs,
                                rows.values, rows.advantages, rows.returns,
                                clip=c.clip_coef, clip_value=c.clip_value,
                                normalize=c.normalize_advantages,
                                entropy_coef=c.entropy_coef, value_coef=c.value_coef)
                self.optimizer.zero_grad()
                loss.loss.backward()
                if c.max_grad_norm is not None:
                    self.optimizer.clip_grad_norm_(c.max_grad_norm)
                self.optimizer.step()
                figures.append(loss)
            if c.target_kl is not None and figures[-1].approx_kl > c.target_kl:
                break   # the policy moved far enough from the one that acted
        copy_model_state(self.net, self.model)   # the next policy, for every actor
        n = len(figures)
        return {"minibatches": n, "loss": sum(float(f.loss.detach()) for f in figures) / n,
                "approx_kl": sum(f.approx_kl for f in figures) / n,
                "clip_fraction": sum(f.clip_fraction for f in figures) / n,
                "entropy": sum(f.entropy for f in figures) / n,
                "value_loss": sum(f.value for f in figures) / n}

    @torch.no_grad()
    def greedy_actions(self, obs: torch.Tensor) -> torch.Tensor:
        # The shared network: evaluations come after the round's barrier, when every
        # update is done and nobody writes it.
        return self.model(obs)[0].argmax(-1)

    def eval_model(self):
        return self.model

    def close(self) -> None:
        self.actor.close()

    def state(self) -> dict:
        state = {"rng": self.actor.generator.get_state(), "env_steps": self.env_steps,
                 "updates_done": self.updates_done}
        if self.learner:
            state.update(model=model_snapshot(self.model),
                         optimizer=self.optimizer.state_dict(),
                         shuffler=self.shuffler.get_state())
        return state

    def load_state(self, state: dict) -> None:
        self.actor.generator.set_state(state["rng"])
        self.env_steps, self.updates_done = state["env_steps"], state["updates_done"]
        if self.learner:
            self.optimizer.load_state_dict(state["optimizer"])
            self.shuffler.set_state(state["shuffler"])
