"""The epoch strategies' worker program: one round is one epoch over this rank's batches
(its shard, or for hogwild what it takes from a shared queue).

``single``, ``hogwild``, ``sync``, ``ddp`` and ``dp`` all run this loop; they differ only at
the few points an :class:`EpochStrategy` names (which replica a worker trains, what happens
after backward, after a step and at the end of an epoch).
"""

from __future__ import annotations

import copy
import functools
import math
import time
from dataclasses import dataclass
from typing import Iterable

import torch
import torch.nn as nn

from ..checkpoint import model_snapshot
from ..comm.base import Group
from ..data.batch_transform import batch_transform_for
from ..data.device_feed import feed_for
from ..data.sharding import batches, shard_indices
from ..engine.channels_last import ChannelsLastTraining, forward_in_its_layout
from ..engine.compiling import compile_if_asked
from ..engine.optim import build_optimizer
from ..engine.autocast import in_precision
from ..engine.profile import RoundClock
from ..engine.schedule import learning_rate
from ..engine.step import first_nonfinite, train_step
from .model_state import copy_model_state
from .base import ResourceNeeds, RoundWork, Strategy, WorkerProgram, model_tensor_count


@dataclass(frozen=True)
class EpochBatches:
    """What one rank trains in one epoch."""

    steps: int          # the epoch's length in one rank's steps (the schedule anneals over
                        # it): a shard's, or what a shard's would be
    batches: Iterable   # (step, sample indices) pairs, in training order


def batch_shapes(samples: int, size: int) -> list[int]:
    """The batch sizes ``samples`` cut in batches of ``size`` make: a full one and the
    shorter last one (each a new shape for the kernels a worker generates)."""
    return sorted({min(samples, size), samples % size} - {0})


class EpochStrategy(Strategy):
    """Every worker trains its 1/N shard of each epoch (DistributedSampler semantics), unless
    the strategy hands batches out otherwise (``epoch_batches``)."""

    #: lr_schedule: cosine anneals along an epoch's steps, which only epochs have.
    settings = frozenset({"epochs", "steps_per_epoch", "max_restarts", "lr_schedule"})
    instead = {"rounds": "{epochs}"}

    def needs(self, model, data, plan) -> ResourceNeeds:
        return ResourceNeeds(comm_numel=self.comm_numel(model),
                             shared_tensors=model_tensor_count(model),
                             batch_sizes=tuple(self.batch_sizes(data, plan.workers)),
                             private_replicas=self.replicas_are_private(plan))

    def comm_numel(self, model: nn.Module) -> int:
        """How many numbers one rank contributes to the largest collective."""
        return 0

    def replicas_are_private(self, plan) -> bool:
        """Whether each worker trains a model of its own (see ``ResourceNeeds``)."""
        return True

    def samples_per_round(self, data, workers):
        shard = len(shard_indices(len(data.train), workers, 0, 0, 0, shuffle=False,
                                  drop_last=self.config.drop_last))
        if self.config.steps_per_epoch is not None:
            shard = min(shard, self.config.steps_per_epoch * self.config.batch_size)
        return shard * workers

    def batch_sizes(self, data, workers):
        """A full batch and the shorter last one of a shard (every rank's shard has the same
        length, padded as DistributedSampler pads)."""
        return batch_shapes(self.samples_per_round(data, workers) // workers,
                            self.config.batch_size)

    def program(self, setup) -> WorkerProgram:
        return EpochProgram(self, setup)

    def epoch_batches(self, num_samples: int, group: Group, epoch: int) -> EpochBatches:
        """The batches this rank trains in ``epoch``: its DistributedSampler shard, cut in
        batches. Every rank takes as many steps as every other, which synchronous strategies
        need."""
        config = self.config
        shard = shard_indices(num_samples, group.world_size, group.rank, config.seed, epoch,
                              drop_last=config.drop_last)
        if config.steps_per_epoch is not None:
            shard = shard[:config.steps_per_epoch * config.batch_size]
        return EpochBatches(steps=-(-len(shard) // config.batch_size),
                            batches=enumerate(batches(shard, config.batch_size)))

    # -- the points where data-parallel algorithms differ ------------------------------------
    def replica(self, model: nn.Module, group: Group, device: torch.device) -> nn.Module:
        """A private copy by default: workers must not write each other's parameters."""
        return copy.deepcopy(model).to(device)

    def may_change_layout(self, replica: nn.Module) -> bool:
        """Whether this worker may lay ``replica``'s tensors out as it likes (channels-last)
        while it trains: not when other processes share them (a new layout is a new,
        private copy) -- as the caller's model under ``single`` may be."""
        tensors = list(replica.parameters()) + list(replica.buffers())
        return not any(t.is_shared() for t in tensors)

    def unwrap(self, replica: nn.Module) -> nn.Module:
        """The plain module behind ``replica`` (for evaluation and publishing)."""
        return replica

    def optimizer(self, replica: nn.Module) -> torch.optim.Optimizer:
        c = self.config
        return build_optimizer(replica.parameters(), c.optimizer, c.lr, c.momentum,
                               c.weight_decay)

    def restore_optimizer(self, optimizer: torch.optim.Optimizer, state: dict) -> None:
        optimizer.load_state_dict(state)

    def after_backward(self, replica: nn.Module, group: Group) -> None:
        pass

    def after_step(self, replica: nn.Module, group: Group, step: int) -> None:
        pass

    def end_epoch(self, replica: nn.Module, group: Group, steps: int) -> None:
        pass

    def publish(self, replica: nn.Module, shared_model: nn.Module, group: Group) -> None:
        """Rank 0 copies its replica into the parent's shared model (all replicas are equal)."""
        if group.rank == 0:
            copy_model_state(self.unwrap(replica), shared_model)


class EpochProgram(WorkerProgram):
    """A plain PyTorch training loop over this rank's batches of one epoch."""

    def __init__(self, strategy: EpochStrategy, setup):
        self.strategy, self.setup = strategy, setup
        self.group = setup.group
        self.model = strategy.replica(setup.model, setup.group, setup.device)
        # A replica of a conv net that this worker may lay out as it likes trains in
        # channels-last on CPU (a step of the classic CNN at batch 64: 6.2 instead of 11
        # ms); values still travel through the collectives and into the shared model in the
        # usual order.
        self.layout = (ChannelsLastTraining(self.model, setup.device)
                       if strategy.may_change_layout(self.model) else None)
        self.forward = in_precision(self.layout.forward if self.layout is not None
                                    else forward_in_its_layout(self.model),
                                    strategy.config.precision, setup.device)
        self.optimizer = strategy.optimizer(self.model)
        self.feed = feed_for(setup.data.train, setup.device, setup.group.world_size,
                             rank=setup.group.rank, beat=getattr(setup.progress, "beat", None))
        self.transform = batch_transform_for(strategy.config)   # None: batches as gathered
        self.after_backward = functools.partial(strategy.after_backward, self.model,
                                                self.group)
        compile_if_asked(strategy.config, strategy.unwrap(self.model), self.forward,
                         self.feed, setup.data.train, setup.data.task, setup.device,
                         strategy.no_cuda_graphs)

    def train_round(self, epoch: int) -> RoundWork:
        config, strategy, group, setup = self.strategy.config, self.strategy, self.group, \
            self.setup
        model, optimizer, train_data = self.model, self.optimizer, setup.data.train
        if self.layout is not None:
            self.layout.resume()
        mine = strategy.epoch_batches(len(train_data), group, epoch)
        started = time.monotonic()
        # On the step's device: adding a GPU loss to a CPU sum would fail (or, moved,
        # wait for the GPU every step); one read at the end of the epoch.
        loss_sum = torch.zeros((), dtype=torch.float64, device=setup.device)
        losses = []   # each step's, kept (no copy) to name the first non-finite one
        model.train()
        steps = samples = 0
        clock = RoundClock(group)
        after_backward = clock.timed(self.after_backward, "collective")
        after_step = clock.timed(strategy.after_step, "collective")
        try:
            for step, indices, inputs, targets in self.feed.batches(mine.batches):
                lr = learning_rate(config.lr_schedule, config.lr, config.lr_decay, epoch, step,
                                   mine.steps)
                for param_group in optimizer.param_groups:  # a function of (epoch, step)
                    param_group["lr"] = lr
                if self.transform is not None:   # fresh draws for each (epoch, step, rank)
                    inputs, targets = self.transform.apply(
                        inputs, targets, (config.seed, epoch, step, group.rank))
                clock.add("data", clock.lap())
                loss = train_step(self.forward, optimizer, inputs, targets,
                                  setup.data.task, after_backward, clock)
                after_step(model, group, step)
                loss_sum += loss * len(indices)
                losses.append(loss)
                setup.progress.advance(len(indices))
                steps += 1
                samples += len(indices)
                clock.add("compute", clock.lap())
            clock.timed(strategy.end_epoch, "collective")(model, group, steps)
        except BaseException:   # Ctrl-C or an error: the caller keeps its model's layout
            self._hand_back_callers_model()
            raise
        loss_sum = float(loss_sum)
        extras = {"profile": clock.finish().as_dict()}
        if not math.isfinite(loss_sum):
            extras["first_nonfinite_step"] = first_nonfinite(losses)
        return RoundWork(steps=steps, samples=samples, loss_sum=loss_sum,
                         started=started, ended=time.monotonic(), extras=extras)

    def eval_model(self) -> nn.Module:
        return self.strategy.unwrap(self.model)

    def state(self) -> dict:
        state = {"optimizer": self.optimizer.state_dict(), "rng": torch.get_rng_state()}
        if self.group.rank == 0:
            state["model"] = model_snapshot(self.eval_model())
        return state

    def load_state(self, state: dict) -> None:
        self.strategy.restore_optimizer(self.optimizer, state["optimizer"])
        torch.set_rng_state(state["rng"])

    def publish(self, shared_model: nn.Module) -> None:
        self.strategy.publish(self.model, shared_model, self.group)
        self._hand_back_callers_model()

    def _hand_back_callers_model(self) -> None:
        """``single`` trains the caller's model itself: between rounds, and when training
        stops, it is in the layout the caller gave it."""
        if self.layout is not None and self.model is self.setup.model:
            self.layout.hand_back()
