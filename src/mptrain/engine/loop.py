"""The driver every worker runs, whatever the strategy: round after round of the strategy's
own work, then the parts every strategy shares -- evaluation, this rank's checkpoint part, a
barrier, publishing, the report to the parent, and the stop at a target accuracy.

A round is an epoch for the data-parallel strategies and a round of sampled clients for
``fedavg``; what happens inside it is the strategy's worker program (``strategies.base``).
"""

from __future__ import annotations

import io
import resource
import time
from dataclasses import dataclass, field

import torch

from ..data.sharding import eval_shard
from ..data.sources import CLASSIFICATION
from .channels_last import ChannelsLastEvaluation
from .seeding import seed_global_generator
from .task import evaluate


@dataclass(frozen=True)
class EpochReport:
    """What one rank did in one round (an epoch, or a fedavg round); the parent combines the
    reports of all ranks."""

    epoch: int                 # 0-based round index
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
    extras: dict = field(default_factory=dict)   # strategy-specific (fedavg: clients, ...)


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
    resume_state: dict | None = None      # this rank's part of the checkpoint resumed from
    checkpoint_every: int | None = None   # rounds
    #: Whether this rank reports its process's page faults: ranks that take turns in one
    #: process (``launch.turns``) share them, and only the first of them counts them.
    counts_faults: bool = True


def train(setup: WorkerSetup) -> None:
    config, group = setup.config, setup.group
    test_data, task = setup.data.test, setup.data.task
    seed_global_generator(config.seed + setup.rank, setup.device)
    program = setup.strategy.program(setup)
    if setup.resume_state is not None:
        program.load_state(setup.resume_state)
    layout = ChannelsLastEvaluation(setup.device)
    # The start line. Ranks that trained while their peers were still being set up would
    # only wait at their first collective, and with more workers than cores take the CPU
    # those peers need to get there; the first round's clock starts here for every rank,
    # so set-up is counted as start-up, not as training.
    group.barrier()

    for index in range(setup.start_epoch, config.units):
        faults_before = minor_faults() if setup.counts_faults else 0
        work = program.train_round(index)
        last = index + 1 == config.units or work.last
        eval_loss, correct, count = 0.0, 0, 0
        evaluating = test_data is not None and (last or (index + 1) % config.eval_every == 0)
        if evaluating:
            indices = eval_shard(len(test_data), group.world_size, group.rank)
            eval_loss, correct, count = evaluate(program.eval_model(), test_data, indices,
                                                 task, config.eval_batch_size, setup.device,
                                                 beat=setup.progress.beat, layout=layout)
        evaluated_at = time.monotonic()
        checkpoint = None
        if checkpoint_due(setup.checkpoint_every, index, config.units):
            # Before the barrier: under hogwild nobody writes the shared parameters now.
            checkpoint = encode_state(group.rank, program.state())
        # Nobody trains the next round (hogwild: writes shared parameters) while a peer
        # still evaluates this one.
        group.barrier()
        program.publish(setup.model)
        setup.progress.beat()
        setup.report(EpochReport(
            epoch=index, rank=group.rank, steps=work.steps, train_samples=work.samples,
            train_loss_sum=work.loss_sum, train_started=work.started, train_ended=work.ended,
            eval_loss_sum=eval_loss, eval_correct=correct, eval_count=count,
            minor_faults=(minor_faults() - faults_before) if setup.counts_faults else 0,
            evaluated_at=evaluated_at,
            checkpoint=checkpoint, extras=work.extras))
        if work.last:
            break  # the program's own stop (every rank says the same)
        if evaluating and config.target_accuracy is not None and task == CLASSIFICATION \
                and ratio_over_ranks(group, correct, count, empty=0.0,
                                     numerator_is_count=True) >= config.target_accuracy:
            break  # every rank computed the same accuracy, so every rank stops here


def ratio_over_ranks(group, numerator: float, denominator: int, empty: float,
                     numerator_is_count: bool = False) -> float:
    """Every rank's ``numerator`` summed over every rank's ``denominator`` (a count) summed,
    identical on every rank (the test accuracy, the mean evaluation return); ``empty`` when
    the counts add up to 0."""
    # float32, the group's type: sums of returns stay exact far beyond CartPole's 50,000.
    totals = torch.tensor([float(numerator), float(denominator)])
    group.average_([totals])
    total, count = (v * group.world_size for v in totals.tolist())
    # Means of integers: scaled back and rounded, they are the exact sums on every rank, so
    # every rank (and the parent, from the reports) computes the same quotient.
    count = round(count)
    if numerator_is_count:
        total = round(total)
    return total / count if count > 0 else empty


def encode_state(rank: int, state: dict) -> bytes:
    """Rank ``rank``'s checkpoint part as bytes (tensors must not travel as shared
    handles)."""
    buffer = io.BytesIO()
    torch.save({"rank": rank, **state}, buffer)
    return buffer.getvalue()


def checkpoint_due(every: int | None, index: int, units: int) -> bool:
    return every is not None and ((index + 1) % every == 0 or index + 1 == units)


def minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
