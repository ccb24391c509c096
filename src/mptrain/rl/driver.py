"""The driver every actor process runs: round after round of the algorithm's own work
(acting and learning), then what every algorithm shares -- greedy evaluation, this rank's
checkpoint part, a barrier, the report to the parent, the stop at a target return.

It is ``engine.loop.train`` for environments instead of a test set, and uses the same
services: the group's barrier, the progress board, the parent's report channel and the
checkpoint encoding.
"""

from __future__ import annotations

import time
from abc import abstractmethod

import torch

from ..engine.loop import (EpochReport, checkpoint_due, encode_state, minor_faults,
                           ratio_over_ranks)
from ..engine.seeding import seed_global_generator
from ..strategies.base import ResourceNeeds, Strategy, WorkerProgram, model_tensor_count
from .acting import evaluate_greedy
from .metrics import rl_round_extras


class ActorStrategy(Strategy):
    """An RL algorithm: its rounds are environment steps and its reports carry returns."""

    unit = "round"

    def needs(self, model, data, plan):
        # Actors act on the shared model (a3c) or a learner's (dqn): nothing to rehearse.
        return ResourceNeeds(comm_numel=0, shared_tensors=model_tensor_count(model),
                             private_replicas=False, rehearse=False)

    def samples_per_round(self, data, workers: int) -> int:
        return self.config.round_steps

    def round_extras(self, reports) -> dict:
        return rl_round_extras(reports)


class ActorProgram(WorkerProgram):
    """An RL worker program: a round of acting and learning, and a greedy policy."""

    @abstractmethod
    def greedy(self, obs: torch.Tensor) -> int:
        """The action the trained policy takes for a batch of one observation."""


def train_rl(setup) -> None:
    config, group = setup.config, setup.group
    seed_global_generator(config.seed + setup.rank, setup.device)
    program = setup.strategy.program(setup)
    if setup.resume_state is not None:
        program.load_state(setup.resume_state)
    group.barrier()  # rank 0 restores shared state (replay, optimizer) before anyone acts

    for index in range(setup.start_epoch, config.units):
        faults_before = minor_faults()
        work = program.train_round(index)
        last = index + 1 == config.units
        evaluating = last or (config.eval_every is not None
                              and (index + 1) % config.eval_every == 0)
        saving = checkpoint_due(setup.checkpoint_every, index, config.units)
        if evaluating or saving:
            group.barrier()  # nobody writes the shared parameters while they are read
        returns = []
        if evaluating:
            mine = range(group.rank, config.eval_episodes, group.world_size)
            returns = evaluate_greedy(program.greedy, config.env, mine,
                                      beat=setup.progress.beat)
        evaluated_at = time.monotonic()
        checkpoint = encode_state(group.rank, program.state()) if saving else None
        group.barrier()
        setup.progress.beat()
        setup.report(EpochReport(
            epoch=index, rank=group.rank, steps=work.steps, train_samples=work.samples,
            train_loss_sum=work.loss_sum, train_started=work.started, train_ended=work.ended,
            eval_loss_sum=0.0, eval_correct=0, eval_count=0,
            minor_faults=minor_faults() - faults_before, evaluated_at=evaluated_at,
            checkpoint=checkpoint, extras={**work.extras, "eval_returns": returns}))
        if evaluating and config.target_return is not None \
                and ratio_over_ranks(group, sum(returns), len(returns),
                                     empty=float("-inf")) >= config.target_return:
            break  # every rank computed the same mean, so every rank stops here
