"""The training loop every worker runs, whatever the strategy.

It reads top to bottom like a plain PyTorch loop; the strategy's hooks are the only places
where algorithms differ (see ``strategies.base``).
"""

from __future__ import annotations

import resource
import time
from dataclasses import dataclass

import torch

from ..checkpoint import worker_state
from ..data.sharding import batches, eval_shard, shard_indices
from .schedule import learning_rate
from .task import evaluate, loss_fn


@dataclass(frozen=True)
class EpochReport:
    """What one rank did in one epoch; the parent combines the reports of all ranks."""

    epoch: int
    rank: int
    steps: int
    train_samples: int
    train_loss_sum: float
    train_started: float   # time.monotonic(): one clock for all processes of the machine
    train_ended: float
    eval_loss_sum: float
    eval_correct: int
    eval_count: int
    minor_faults: int
    evaluated_at: float = 0.0          # time.monotonic() when this rank's evaluation ended
    checkpoint: bytes | None = None   # this rank's part of a checkpoint, when one is due


@dataclass
class WorkerSetup:
    """Everything a worker needs, passed explicitly: spawn'd children have no globals."""

    rank: int
    config: object          # TrainConfig
    data: object            # DataBundle, tensors in shared memory
    model: object           # the parent's model (shared memory when there are workers)
    strategy: object        # Strategy
    group: object           # comm.Group
    progress: object        # has advance(samples) and beat()
    report: object          # callable(EpochReport)
    device: torch.device
    start_epoch: int = 0
    resume_state: dict | None = None      # this rank's optimizer and RNG state
    checkpoint_every: int | None = None   # epochs


def train(setup: WorkerSetup) -> None:
    config, strategy, group = setup.config, setup.strategy, setup.group
    train_data, test_data, task = setup.data.train, setup.data.test, setup.data.task
    torch.manual_seed(config.seed + setup.rank)

    model = strategy.replica(setup.model, group, setup.device)
    optimizer = strategy.optimizer(model)
    if setup.resume_state is not None:
        strategy.restore_optimizer(optimizer, setup.resume_state["optimizer"])
        torch.set_rng_state(setup.resume_state["rng"])

    for epoch in range(setup.start_epoch, config.epochs):
        shard = shard_indices(len(train_data), group.world_size, group.rank, config.seed, epoch)
        faults_before = _minor_faults()
        started = time.monotonic()
        if config.steps_per_epoch is not None:
            shard = shard[:config.steps_per_epoch * config.batch_size]
        steps_in_epoch = -(-len(shard) // config.batch_size)
        loss_sum = torch.zeros((), dtype=torch.float64)
        model.train()
        steps = 0
        for step, indices in enumerate(batches(shard, config.batch_size)):
            lr = learning_rate(config.lr_schedule, config.lr, config.lr_decay, epoch, step,
                               steps_in_epoch)
            for param_group in optimizer.param_groups:  # a function of (epoch, step): resumable
                param_group["lr"] = lr
            inputs, targets = train_data.batch(indices)
            inputs, targets = inputs.to(setup.device), targets.to(setup.device)
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(task, model(inputs), targets)
            loss.backward()
            strategy.after_backward(model, group)
            optimizer.step()
            strategy.after_step(model, group, step)
            loss_sum += loss.detach() * len(indices)  # no .item(): no per-step sync on GPU
            setup.progress.advance(len(indices))
            steps += 1
        strategy.end_epoch(model, group, steps)
        ended = time.monotonic()

        eval_loss, correct, count = 0.0, 0, 0
        if test_data is not None:
            indices = eval_shard(len(test_data), group.world_size, group.rank)
            eval_loss, correct, count = evaluate(strategy.unwrap(model), test_data, indices,
                                                 task, config.eval_batch_size, setup.device,
                                                 beat=setup.progress.beat)
        evaluated_at = time.monotonic()
        checkpoint = None
        if _checkpoint_due(setup.checkpoint_every, epoch, config.epochs):
            # Before the barrier: under hogwild nobody writes the shared parameters now.
            checkpoint = worker_state(group.rank, strategy.unwrap(model)
                                      if group.rank == 0 else None, optimizer)
        # Nobody trains the next epoch (hogwild: writes shared parameters) while a peer
        # still evaluates this one.
        group.barrier()
        strategy.publish(model, setup.model, group)
        setup.progress.beat()
        setup.report(EpochReport(
            epoch=epoch, rank=group.rank, steps=steps, train_samples=len(shard),
            train_loss_sum=float(loss_sum), train_started=started, train_ended=ended,
            eval_loss_sum=eval_loss, eval_correct=correct, eval_count=count,
            minor_faults=_minor_faults() - faults_before, evaluated_at=evaluated_at,
            checkpoint=checkpoint))


def _checkpoint_due(every: int | None, epoch: int, epochs: int) -> bool:
    return every is not None and ((epoch + 1) % every == 0 or epoch + 1 == epochs)


def _minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
