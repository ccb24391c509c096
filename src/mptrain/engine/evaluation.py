"""How a worker scores its model after a round, and whether the run has reached its target.

The driver (``engine.loop``) is the same for every run; what differs between a supervised
run and an RL run is only this: a test set split over the ranks or greedy episodes, and the
accuracy or the mean return that stops the run. Each kind is a small class the run's task
names (``SupervisedFamily.evaluation``, ``RLFamily.evaluation``); the driver builds one per rank.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from ..data.device_feed import feed_for
from ..data.sharding import eval_shard
from ..data.sources import CLASSIFICATION
from .channels_last import ChannelsLastEvaluation
from .task import evaluate


@dataclass(frozen=True)
class Evaluation:
    """This rank's share of one evaluation; the parent adds the shares of all ranks."""

    loss_sum: float = 0.0
    correct: int = 0
    count: int = 0
    extras: dict = field(default_factory=dict)


class RoundEvaluation(ABC):
    """The interface the driver calls; one instance per rank, built in the worker."""

    #: Whether every rank must have finished its round before any rank evaluates or writes
    #: its checkpoint part. Programs that write a shared model lock-free until the end of
    #: their round (RL actors) would otherwise be read half-updated.
    settles_first: ClassVar[bool] = False

    def __init__(self, setup):
        self.setup = setup

    @abstractmethod
    def due(self, index: int, last: bool) -> bool:
        """Whether round ``index`` (0-based) ends with an evaluation."""

    @abstractmethod
    def run(self, program) -> Evaluation:
        """This rank's share of the evaluation of ``program``'s model."""

    def reached_target(self, evaluation: Evaluation) -> bool:
        """The same answer on every rank (a collective): stop after this round?"""
        return False

    def state(self) -> dict:
        """What this rank's checkpoint part keeps of the evaluations so far (RL: the best
        policy), beside its program's ``state()``; names of its own."""
        return {}

    def load_state(self, state: dict) -> None:
        """Continue from this rank's checkpoint part (``state``)."""


class TestSetEvaluation(RoundEvaluation):
    """Supervised runs: each rank scores its slice of the test set; a classification run stops
    at ``target_accuracy`` over all ranks."""

    def __init__(self, setup):
        super().__init__(setup)
        self.layout = ChannelsLastEvaluation(setup.device)
        self.feed = feed_for(setup.data.test, setup.device, setup.group.world_size,
                             rank=setup.group.rank, beat=setup.progress.beat) \
            if setup.data.test is not None else None

    def due(self, index: int, last: bool) -> bool:
        return self.setup.data.test is not None and \
            every_nth(index, self.setup.config.eval_every, last)

    def run(self, program) -> Evaluation:
        setup, group = self.setup, self.setup.group
        test_data = setup.data.test
        indices = eval_shard(len(test_data), group.world_size, group.rank)
        loss_sum, correct, count = evaluate(
            program.eval_model(), self.feed, indices, setup.data.task,
            setup.config.eval_batch_size, setup.device, beat=setup.progress.beat,
            layout=self.layout, precision=setup.config.precision)
        return Evaluation(loss_sum=loss_sum, correct=correct, count=count)

    def reached_target(self, evaluation: Evaluation) -> bool:
        target = self.setup.config.target_accuracy
        if target is None or self.setup.data.task != CLASSIFICATION:
            return False
        return ratio_over_ranks(self.setup.group, evaluation.correct, evaluation.count,
                                empty=0.0, numerator_is_count=True) >= target


def every_nth(index: int, every: int, last: bool) -> bool:
    """Whether round ``index`` (0-based) is one an evaluation every ``every`` rounds scores:
    each ``every``-th, and the ``last`` whatever it is (the run's result is scored)."""
    return last or (index + 1) % every == 0


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
