"""DQN with parallel actors (one machine Ape-X, Horgan et al. 2018), where a seed names a run.

Actor processes step their own environments epsilon-greedily and feed a replay buffer in
shared memory (``replay``); one learner does double DQN updates (target network, Huber loss,
Adam) on the shared Q-network. With one worker, that process both acts and learns; with
more, rank 0 is the learner only and ranks 1.. are the actors.

Everything is fixed by step counts, never by timing, so two runs with the same settings
give the same learning curve bit for bit:

- environment step ``g`` (the run's ``g``-th, over all actors) is taken by actor
  ``g % actors``; its epsilon is the schedule's at ``g``;
- update ``k`` is due once ``learning_starts + (k + 1) * train_every`` steps exist, and
  samples, with the learner's seeded generator, from the newest ``buffer_size`` of them;
- the actors' steps of period ``c`` (``policy_every`` steps each) act with the network
  published once every update due by the end of period ``c - 2`` was done
  (``published``). An actor waits for that version, and the learner waits for the rows an
  update draws from; neither waits for anything else.

The one-period pipeline is what lets the actors act while the learner learns: the actors
fill period ``c + 1`` while the learner does the updates of period ``c``. The network
they act with is one to two periods old, as Ape-X's actors act with parameters some updates
old, and as stable-baselines3's DQN acts for ``train_freq`` steps between bursts of
``gradient_steps`` updates (rl-baselines3-zoo's CartPole-v1: 256 steps, 128 updates -- the
defaults here).
"""

from __future__ import annotations

import copy
import time
from dataclasses import replace

import torch
import torch.nn.functional as F

from ..checkpoint import model_snapshot
from ..engine.step import step_on_loss
from ..errors import UserError, setting_name
from ..strategies.base import RoundWork
from .acting import EpisodeTracker, actor_seed, as_batch
from .base import ActorProgram, ActorStrategy
from .config import applicable_rl_settings
from .dqn_targets import double_dqn_targets, sample_n_step, target_kind
from .envs import make_env
from .nets import QNetwork
from .plain_adam import PlainAdam
from .published import PublishedPolicy
from .replay import SharedReplay, rows_before
from .schedules import linear_epsilon, update_target

POLICY_LAG = 2     # the actors' steps of period c use the network of period c - 2
MARGIN = 16        # rows an actor writes past those the learner reads (see ``replay``)
WAIT_S = 0.0002    # a pause while waiting for the learner or the actors
MAX_GRAD_NORM = 10.0   # stable-baselines3's DQN default


def actor_count(workers: int) -> int:
    """Processes that step environments: all but the learner, or the one process."""
    return max(1, workers - 1)


def ahead_steps(config) -> int:
    """How many global steps actors may run past the newest step an update draws from:
    an actor in period ``c + 1`` needs version ``c - 1``, published before the updates of
    period ``c``; the rest of period ``c`` and a margin fit in the third period."""
    return 3 * config.policy_every


def annealed_lr(config, update: int) -> float:
    """The learning rate of update ``update`` (0-based) with ``anneal_lr``: from ``lr`` down
    linearly to 0 at the run's last update, as ppo's."""
    total = max(1, (config.steps - config.learning_starts) // config.train_every)
    return config.learning_rate * max(0.0, 1.0 - update / total)


def target_words(config) -> str:
    """How the target network follows the online one, for the banner."""
    every = ("every update" if config.target_every == 1
             else f"every {config.target_every} updates")
    if config.target_tau >= 1.0:
        return f"target copied {every}"
    return f"target moved {config.target_tau:g} of the way {every}"


class DQNStrategy(ActorStrategy):
    name = "dqn"
    builds_torch_optimizer = False   # the learner's Adam is plain_adam's
    network = QNetwork   # built-in network, and the outputs a --net must give
    # rl-baselines3-zoo's CartPole-v1 DQN: 2.3e-3, two layers of 256
    default_lr = 2.3e-3
    default_hidden = 256

    @classmethod
    def check_config(cls, config) -> None:
        if config.buffer_size < config.batch_size:
            raise UserError(f"{setting_name('buffer_size')} {config.buffer_size} is smaller than "
                            f"{setting_name('batch_size')} {config.batch_size}")

    @classmethod
    def check_checkpoint(cls, checkpoint) -> None:
        if checkpoint.ranks and "published" not in checkpoint.ranks[0]:
            raise UserError("this dqn checkpoint was written by an earlier mptrain, whose "
                            "replay buffer had another layout; start a new run")

    @classmethod
    def check_resume(cls, config, checkpoint) -> None:
        # The checkpoint holds the network it trained: with another head it would not load.
        saved = applicable_rl_settings(checkpoint.config).get("dueling", False)
        if config.net is None and saved != config.dueling:
            name = setting_name("dueling")
            raise UserError(f"the checkpoint's network has {'a' if saved else 'no'} dueling "
                            f"head and {name} asks for {'one' if config.dueling else 'none'}"
                            f": a dqn run resumes with the network it trained; leave {name} "
                            "out, or start a new run")

    def __init__(self, config):
        super().__init__(config)
        self.replay: SharedReplay | None = None
        self.policy: PublishedPolicy | None = None

    def prepare(self, model, data=None, plan=None) -> None:
        super().prepare(model, data, plan)
        c = self.config
        self.replay = SharedReplay.create(c.buffer_size, data.shape.obs_dim,
                                          actor_count(c.workers), ahead_steps(c))
        self.policy = PublishedPolicy.create(model)

    def needs(self, model, data, plan):
        needs = super().needs(model, data, plan)
        c = self.config
        replay = SharedReplay.estimate_nbytes(c.buffer_size, data.shape.obs_dim,
                                              actor_count(c.workers), ahead_steps(c))
        policy = 2 * sum(t.numel() * t.element_size() for t in model.state_dict().values())
        return replace(needs, shared_tensors=needs.shared_tensors + 7
                       + PublishedPolicy.tensor_count(model),
                       extra_shared_bytes=needs.extra_shared_bytes + replay + policy)

    def program(self, setup) -> "DQNProgram":
        return DQNProgram(setup, self.replay, self.policy)

    def describe(self, plan, model) -> list[str]:
        c = self.config
        who = ("1 process acting and learning" if plan.workers == 1 else
               f"{actor_count(plan.workers)} actor(s), rank 0 the learner")
        return [f"dqn: {who}; replay {c.buffer_size:,} in shared memory, batch "
                f"{c.batch_size}, 1 update per {c.train_every} steps after "
                f"{c.learning_starts:,}, {target_words(c)}, {target_kind(c)}"
                f"actors' network renewed every {c.policy_every} steps, epsilon "
                f"{c.eps_start:g}->{c.eps_end:g} over {c.eps_steps:,} steps"]


class DQNProgram(ActorProgram):
    def __init__(self, setup, replay: SharedReplay, policy: PublishedPolicy):
        c = self.config = setup.config
        self.rank, world = setup.group.rank, setup.group.world_size
        self.model, self.progress, self.replay, self.policy = \
            setup.model, setup.progress, replay, policy
        self.actors = actor_count(world)
        self.learner = self.rank == 0
        self.actor = None if world > 1 and self.learner else max(0, self.rank - 1)
        if self.learner:
            self.target = copy.deepcopy(self.model)  # private: only the learner reads it
            for param in self.target.parameters():
                param.requires_grad_(False)
            self.optimizer = PlainAdam(self.model.parameters(), lr=c.learning_rate)
            self.updates = 0
            self.published = -1
            self.sampler = torch.Generator().manual_seed(c.seed * 7919)
        if self.actor is not None:
            self.acting_net = copy.deepcopy(self.model)   # private: a published version
            for param in self.acting_net.parameters():
                param.requires_grad_(False)
            self.acting_version: int | None = None
            self.explorer = torch.Generator().manual_seed(c.seed * 7919 + 1 + self.actor)
            self.env = make_env(c.env, seed=actor_seed(c.seed, self.actor, 0))
            self.obs = None
            self.tracker = EpisodeTracker()

    # -- the round ---------------------------------------------------------------------------

    def train_round(self, index: int) -> RoundWork:
        c = self.config
        started = time.monotonic()
        end = c.round_end(index)
        steps, loss_sum = 0, 0.0
        updates_before = self.updates if self.learner else 0
        extras = {}
        if self.actor is not None:
            if self.obs is None:  # a new or resumed run starts a fresh episode
                self.obs, _ = self.env.reset(seed=actor_seed(c.seed, self.actor, index))
            while (step := self.replay.next_step(self.actor)) < end:
                loss_sum += self.use_version(step // c.policy_every - POLICY_LAG)
                epsilon = self.act(step)
                steps += 1
            extras = {**self.tracker.take(), "env_steps": self.replay.count(self.actor)}
            if steps:
                extras["epsilon"] = epsilon
        if self.learner:
            loss_sum += self.learn_until(end)
        updates = self.updates - updates_before if self.learner else 0
        extras["updates"] = updates
        # The run's loss is the reports' loss sums over its samples (env steps): the
        # learner's mean update loss, weighted by the round's steps of all actors.
        weighted = loss_sum / max(updates, 1) * c.round_size(index) if self.learner else 0.0
        return RoundWork(steps=updates, samples=steps, loss_sum=weighted,
                         started=started, ended=time.monotonic(), extras=extras)

    # -- acting ------------------------------------------------------------------------------

    def use_version(self, version: int) -> float:
        """Act with published ``version`` from now on: the acting learner first learns up
        to it, an actor waits until it is published. Returns the loss sum of updates done."""
        if version == self.acting_version:
            return 0.0
        loss_sum = 0.0
        if self.learner:
            loss_sum = self.learn_until((version + 1) * self.config.policy_every)
        else:
            while self.policy.newest() < version:
                self.progress.beat()
                time.sleep(WAIT_S)
        self.policy.load_into(self.acting_net, version)
        self.acting_version = version
        return loss_sum

    def act(self, step: int) -> float:
        """Global step ``step``: one epsilon-greedy step of this actor's environment into
        the replay buffer. Returns the epsilon it used."""
        c = self.config
        epsilon = linear_epsilon(step, c.eps_start, c.eps_end, c.eps_steps)
        if float(torch.rand((), generator=self.explorer)) < epsilon:
            action = int(torch.randint(self.env.action_space.n, (), generator=self.explorer))
        else:
            with torch.no_grad():
                action = int(self.acting_net(as_batch(self.obs)).argmax(-1))
        next_obs, reward, terminated, truncated, _ = self.env.step(action)
        # A time limit (truncated) is not terminal: the target bootstraps from next_obs.
        self.replay.add(self.actor, self.obs, action, reward, next_obs, terminated,
                        ended=terminated or truncated)
        self.tracker.step(reward, terminated or truncated)
        self.obs = self.env.reset()[0] if terminated or truncated else next_obs
        self.progress.advance(1)
        return epsilon

    # -- learning ----------------------------------------------------------------------------

    def learn_until(self, limit: int) -> float:
        """Every update due by global step ``limit``, and every version to publish by then,
        in the order of the steps they are due at; returns the updates' loss sum."""
        c = self.config
        loss_sum = 0.0
        while True:
            update_due = c.learning_starts + (self.updates + 1) * c.train_every
            publish_due = (self.published + 2) * c.policy_every
            if min(update_due, publish_due) > limit:
                return loss_sum
            # Actors ahead of the learner leave it nothing to wait for, and waiting beats:
            # without this, a round of updates looks like a hang to the watchdog.
            self.progress.beat()
            if update_due <= publish_due:
                self.wait_for_rows(update_due, limit, margin=True)
                loss_sum += self.update(max(0, update_due - c.buffer_size), update_due)
            else:
                # No actor reads the slot being overwritten once every step before
                # ``publish_due`` is written (see ``published``).
                self.wait_for_rows(publish_due, limit, margin=False)
                self.published += 1
                self.policy.publish(self.model, self.published)

    def wait_for_rows(self, step: int, limit: int, margin: bool) -> None:
        """Until every other process's actor has written its steps before ``step`` (and
        with ``margin``, up to ``MARGIN`` more, but none past ``limit``, where actors stop
        for this round)."""
        extra = min(MARGIN, self.config.policy_every // self.actors) if margin else 0
        for actor in range(self.actors):
            if actor == self.actor:
                continue   # this process's own rows are written
            needed = min(rows_before(step, actor, self.actors) + extra,
                         rows_before(limit, actor, self.actors))
            while self.replay.written(actor) < needed:
                self.progress.beat()
                time.sleep(WAIT_S)

    def update(self, first: int, end: int) -> float:
        """One double DQN step on a batch drawn from global steps ``[first, end)`` (its
        n-step returns too: ``dqn_targets``)."""
        c = self.config
        if c.return_steps > 1:
            batch = sample_n_step(self.replay, first, end, c.batch_size, self.sampler,
                                  c.return_steps, c.gamma)
        else:
            batch = self.replay.sample(first, end, c.batch_size, self.sampler)
        if c.anneal_lr:   # by the update's number: a seed still names the run
            self.optimizer.param_groups[0]["lr"] = annealed_lr(c, self.updates)
        q = self.model(batch.obs).gather(1, batch.actions.unsqueeze(1)).squeeze(1)
        target = double_dqn_targets(self.model, self.target, batch, c.gamma,
                                    c.advantage_learning)
        loss = F.smooth_l1_loss(q, target)
        step_on_loss(self.optimizer, loss, max_grad_norm=MAX_GRAD_NORM)
        self.updates += 1
        if self.updates % c.target_every == 0:
            update_target(self.target, self.model, c.target_tau)
        return loss.item()

    # -- evaluation and checkpoints ----------------------------------------------------------

    @torch.no_grad()
    def greedy_actions(self, obs: torch.Tensor) -> torch.Tensor:
        # The learner's network: evaluations come after the round's barrier, when every
        # update due by the round's end is done and nobody writes it.
        return self.model(obs).argmax(-1)

    def eval_model(self):
        return self.model

    def close(self) -> None:
        if self.actor is not None:
            self.env.close()

    def state(self) -> dict:
        state = {}
        if self.actor is not None:
            state["explorer"] = self.explorer.get_state()
        if self.learner:  # the learner's and the shared parts, once
            state.update(model=model_snapshot(self.model), sampler=self.sampler.get_state(),
                         target=self.target.state_dict(), optimizer=self.optimizer.state_dict(),
                         updates=self.updates, published=self.published,
                         policy=self.policy.state(), replay=self.replay.state())
        return state

    def load_state(self, state: dict) -> None:
        if self.learner and "published" not in state:
            raise UserError("this dqn checkpoint was written by an earlier mptrain, whose "
                            "replay buffer had another layout; start a new run")
        if self.actor is not None and "explorer" in state:
            self.explorer.set_state(state["explorer"])
        if self.learner:
            self.sampler.set_state(state["sampler"])
            self.target.load_state_dict(state["target"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.updates, self.published = state["updates"], state["published"]
            self.policy.load_state(state["policy"])
            self.replay.load_state(state["replay"])
