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

from .evaluation import Evaluation, TestSetEvaluation
from .gpu_memory import device_memory, start_round_peak
from .seeding import seed_global_generator


@dataclass(frozen=True)
class RoundReport:
    """What one rank did in one round (an epoch, a fedavg round, an RL round); the parent
    combines the reports of all ranks."""

    index: int                 # 0-based round index
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
    counted: int | None = None   # this rank's progress-board count (launch.board.RoundProgress)
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
    progress: object        # has advance(samples), beat() and counted()
    report: object          # callable(RoundReport)
    device: torch.device
    start_round: int = 0
    resume_state: dict | None = None      # this rank's part of the checkpoint resumed from
    #: The ranks on this rank's machine, sharing its GPUs (torchrun: its node's); None: all.
    local_workers: int | None = None
    checkpoint_every: int | None = None   # rounds
    #: How this rank scores its model after a round (``engine.evaluation``).
    evaluation: type = TestSetEvaluation
    #: Whether this rank reports its process's page faults: ranks that take turns in one
    #: process (``launch.turns``) share them, and only the first of them counts them.
    counts_faults: bool = True


def train(setup: WorkerSetup) -> None:
    config, group = setup.config, setup.group
    seed_global_generator(config.seed + setup.rank, setup.device)
    program = setup.strategy.program(setup)
    try:
        if setup.resume_state is not None:
            program.load_state(setup.resume_state)
        evaluation = setup.evaluation(setup)
        if setup.resume_state is not None:
            evaluation.load_state(setup.resume_state)
        # The start line. Ranks that trained while their peers were still being set up would
        # only wait at their first collective, and with more workers than cores take the CPU
        # those peers need to get there; the first round's clock starts here for every rank,
        # so set-up is counted as start-up, not as training. (It also lets rank 0 restore
        # shared state -- a replay buffer, an optimizer -- before anyone uses it.)
        group.barrier()

        for index in range(setup.start_round, config.units):
            faults_before = minor_faults() if setup.counts_faults else 0
            start_round_peak(setup.device)
            work = program.train_round(index)
            evaluating = evaluation.due(index, last=index + 1 == config.units or work.last)
            saving = checkpoint_due(setup.checkpoint_every, index, config.units)
            if evaluation.settles_first and (evaluating or saving):
                group.barrier()
            score = evaluation.run(program) if evaluating else Evaluation()
            evaluated_at = time.monotonic()
            # Before the barrier: under hogwild nobody writes the shared parameters now.
            checkpoint = encode_state(group.rank, {**program.state(), **evaluation.state()}) \
                if saving else None
            # Nobody trains the next round (hogwild: writes shared parameters) while a peer
            # still evaluates this one.
            group.barrier()
            program.publish(setup.model)
            setup.progress.beat()
            setup.report(RoundReport(
                index=index, rank=group.rank, steps=work.steps, train_samples=work.samples,
                train_loss_sum=work.loss_sum, train_started=work.started,
                train_ended=work.ended, eval_loss_sum=score.loss_sum,
                eval_correct=score.correct, eval_count=score.count,
                minor_faults=(minor_faults() - faults_before) if setup.counts_faults else 0,
                evaluated_at=evaluated_at, checkpoint=checkpoint,
                counted=setup.progress.counted(),
                extras={**work.extras, **score.extras, **device_memory(setup.device)}))
            if work.last:
                break  # the program's own stop (fedavg's privacy budget), on every rank
            if evaluating and evaluation.reached_target(score):
                break  # every rank computed the same score, so every rank stops here
    finally:
        program.close()   # an actor's environments, also when a round raised

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
