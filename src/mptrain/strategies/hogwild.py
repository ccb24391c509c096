"""Hogwild!: lock-free asynchronous SGD on parameters in shared memory (Recht et al., 2011).

Every worker trains batches of the epoch and applies its updates straight to the one shared
copy of the parameters, without locks: updates may interleave, which is the point. Gradients
are allocated lazily by autograd inside each worker, so they stay private.

Optimizer state (momentum buffers, Adam moments) is per worker by default; with
``share_optimizer_state`` it is allocated once in shared memory in the parent and every
worker's optimizer updates the same buffers in place (the "shared Adam" of A3C). Like the
parameters, the state is updated without a lock: two workers stepping at once can lose one
increment of Adam's shared step counter or one momentum update (seen: 17 of 1,920 steps in
a 10-epoch run). That is Hogwild's bargain -- rare, bounded staleness for no waiting -- and
it is why the checkpointed step count can be a little below the steps taken.

With several workers, nobody owns a shard: each takes the epoch's next batch from a queue
in shared memory (``comm.tickets``), so a worker whose core gives it more time trains more
batches, and none waits at the epoch's end for a slower one -- fixed equal shards made the
faster rank wait 2-7% of every epoch on a 2-vCPU VM (issue 24;
benchmarks/results/notebook-2026-11-26.md). Every sample is still trained exactly once per
epoch, in the epoch's seeded order; which worker trains it is decided at run time, as the
order of Hogwild's writes already is.
"""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.nn as nn

from ..comm.tickets import SharedTickets
from ..data.sharding import batches, epoch_permutation
from ..engine.channels_last import hand_back_layout, lay_out_shared_model
from ..engine.optim import fresh_scalar_state, state_like_params
from ..errors import UserError
from ..errors import setting_name as named   # as the caller spelled the setting
from .epochs import EpochBatches, EpochStrategy, batch_shapes


class HogwildStrategy(EpochStrategy):
    name = "hogwild"
    settings = EpochStrategy.settings | {"share_optimizer_state"}
    ranks_share_one_device = True

    @classmethod
    def check_config(cls, config):
        super().check_config(config)
        if config.share_optimizer_state and \
                not state_like_params(config.optimizer, config.momentum):
            # shared_optimizer_state would share nothing, and the banner said it was shared.
            raise UserError(f"{named('share_optimizer_state')} shares the optimizer's state, "
                            f"and plain SGD ({named('momentum')} 0) keeps none; give "
                            f"{named('momentum')} or {named('optimizer')} adam, or drop it")

    def __init__(self, config):
        super().__init__(config)
        self.shared_optimizer_state: list[dict] | None = None
        self.laid_out = False   # whether prepare() laid the caller's model out channels-last
        self.batch_queue: SharedTickets | None = None   # with 2+ workers: see the module doc

    def prepare(self, model: nn.Module, data=None, plan=None) -> None:
        # The shared parameters are the caller's model: they can take the fast layout only
        # here, before any worker maps them (a worker's new layout would be a private copy,
        # and Hogwild would train N models). Measured: benchmarks/results/notebook-2026-11-25.md.
        if self.config.device == "cpu" and data is not None and len(data.train):
            sample, _ = data.train.batch(torch.arange(min(2, len(data.train))))
            self.laid_out = lay_out_shared_model(model, sample) or self.laid_out
        if self.config.device == "cuda":
            # On a GPU the shared parameters are the parent's CUDA tensors: workers (spawned)
            # receive IPC handles to them and update them in place; the parent holds them
            # until every worker has exited. Like ``single``, the caller's model stays there.
            model.to(torch.device("cuda", 0))
        # One counter per epoch, fresh for every attempt (a restarted attempt trains its
        # first epoch again from a full queue).
        self.batch_queue = SharedTickets.create(self.config.units) \
            if plan is not None and _queued(plan.workers) else None
        if self.config.share_optimizer_state:
            self.shared_optimizer_state = shared_optimizer_state(
                list(model.parameters()), self.config.optimizer, self.config.momentum)

    def batches_from_a_queue(self, workers):
        return _queued(workers)

    def epoch_batches(self, num_samples, group, epoch):
        if self.batch_queue is None:
            return super().epoch_batches(num_samples, group, epoch)
        config, world = self.config, group.world_size
        cut = batches(epoch_permutation(num_samples, config.seed, epoch), config.batch_size)
        count = _queued_batches(len(cut), config.steps_per_epoch, world)
        queue = self.batch_queue

        def taken():
            while (ticket := queue.take(epoch)) < count:
                # The step a rank of a fixed shard would be at: what the schedule anneals by.
                yield ticket // world, cut[ticket]

        return EpochBatches(steps=-(-count // world), batches=taken())

    def samples_per_round(self, data, workers):
        if not _queued(workers):
            return super().samples_per_round(data, workers)
        size, total = self.config.batch_size, len(data.train)
        return min(total, _queued_batches(-(-total // size), self.config.steps_per_epoch,
                                          workers) * size)

    def batch_sizes(self, data, workers):
        if not _queued(workers):
            return super().batch_sizes(data, workers)
        return batch_shapes(self.samples_per_round(data, workers), self.config.batch_size)

    def replica(self, model, group, device):
        # The shared model itself: that is the algorithm.
        return model

    def may_change_layout(self, replica):
        return False   # its parameters are every worker's, in shared memory

    def replicas_are_private(self, plan):
        return False

    def optimizer(self, replica):
        optimizer = super().optimizer(replica)
        if self.shared_optimizer_state is not None:
            attach_shared_state(optimizer, replica.parameters(), self.shared_optimizer_state)
        return optimizer

    def restore_optimizer(self, optimizer, state):
        if self.shared_optimizer_state is None:
            return super().restore_optimizer(optimizer, state)
        load_shared_state(self.shared_optimizer_state, state["state"].values())

    def finish(self, model):
        if self.laid_out:
            hand_back_layout(model)
            self.laid_out = False

    def end_epoch(self, replica, group, steps):
        # Everyone has finished writing before anyone evaluates the shared parameters.
        group.barrier()

    def publish(self, replica, shared_model, group):
        pass

    def needs(self, model, data, plan):
        needs = super().needs(model, data, plan)
        config = self.config
        state = state_like_params(config.optimizer, config.momentum)
        # The parameters are shared; each rank holds its gradients and, unless shared, its
        # optimizer state. Shared, every parameter's state tensors (and Adam's step) are
        # shared tensors.
        if not config.share_optimizer_state:
            return replace(needs, private_parameter_copies=1 + len(state))
        per_param = len(state) + len(fresh_scalar_state(config.optimizer))
        return replace(needs, private_parameter_copies=1,
                       shared_tensors=needs.shared_tensors
                       + len(list(model.parameters())) * per_param)

    def describe(self, plan, model):
        state = "shared" if self.config.share_optimizer_state else "per worker"
        lines = [f"lock-free updates to shared parameters; optimizer state {state}"]
        if _queued(plan.workers):
            lines.append("each worker takes the epoch's next batch from a shared queue")
        return lines


def _queued(workers: int) -> bool:
    """Whether ``workers`` take their batches from a queue: one worker has nobody to wait
    for, and keeps its plain shard."""
    return workers > 1


def _queued_batches(batches_in_epoch: int, steps_per_epoch: int | None, workers: int) -> int:
    """How many of an epoch's batches the queue hands out: all of them, or as many as
    ``workers`` ranks of ``steps_per_epoch`` steps would train from fixed shards."""
    if steps_per_epoch is None:
        return batches_in_epoch
    return min(batches_in_epoch, steps_per_epoch * workers)


def shared_optimizer_state(params: list[torch.Tensor], optimizer: str,
                           momentum: float) -> list[dict] | None:
    """Optimizer state tensors in shared memory, laid out as torch's optimizers expect them.

    Both SGD and Adam update these tensors in place, so every worker's step lands in the
    same buffers.
    """
    keys = state_like_params(optimizer, momentum)
    if not keys:
        return None  # plain SGD has no state to share
    states = []
    for param in params:
        state = fresh_scalar_state(optimizer)
        state.update({key: torch.zeros_like(param) for key in keys})
        for tensor in state.values():
            tensor.share_memory_()
        states.append(state)
    return states


def attach_shared_state(optimizer: torch.optim.Optimizer, params,
                        states: list[dict]) -> None:
    """Make ``states`` (from :func:`shared_optimizer_state`) the optimizer's state of
    ``params``: its steps then update the shared tensors in place."""
    for param, state in zip(params, states):
        optimizer.state[param] = state


@torch.no_grad()
def load_shared_state(states: list[dict], saved) -> None:
    """Copy ``saved`` per-parameter states into the shared ``states``
    (``load_state_dict`` would replace the shared tensors by private copies)."""
    for shared, values in zip(states, saved):
        for key, tensor in shared.items():
            tensor.copy_(values[key])
