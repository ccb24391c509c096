"""What every strategy is: a small parent-side class that owns its worker program.

The parent asks a strategy three things: what to put in shared memory before workers start
(``prepare``), how big its collectives are (``comm_numel``) and how much work one round is
(``samples_per_round``, for the progress bar). In each worker, ``program`` builds the
:class:`WorkerProgram` that does one round of work at a time (an epoch for ``sync``/``ddp``,
a round of sampled clients for ``fedavg``). Everything around the rounds -- evaluation,
checkpoint parts, reports, progress, supervision -- is shared (``engine.loop``) and never
rewritten per strategy.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import torch.nn as nn

from ..config import TrainConfig


@dataclass
class RoundWork:
    """What one rank trained in one round; the driver adds evaluation and timing."""

    steps: int
    samples: int
    loss_sum: float              # sum over samples of the training loss
    started: float               # time.monotonic(): one clock for all processes
    ended: float
    extras: dict = field(default_factory=dict)   # strategy-specific, combined by the parent


class WorkerProgram(ABC):
    """One worker's side of an algorithm; built in the worker process by ``Strategy.program``."""

    @abstractmethod
    def train_round(self, index: int) -> RoundWork:
        """Do round ``index`` (0-based) of the run's work."""

    @abstractmethod
    def eval_model(self) -> nn.Module:
        """The model the run produces after this round, as this rank holds it."""

    @abstractmethod
    def state(self) -> dict:
        """This rank's part of a checkpoint (tensors and plain values only)."""

    @abstractmethod
    def load_state(self, state: dict) -> None:
        """Continue from ``state``, as written by :meth:`state`."""

    def publish(self, shared_model: nn.Module) -> None:
        """After a round, put the model where the parent reads it (rank 0 copies, by default
        nothing: strategies that train the shared model itself have nothing to do)."""


class Strategy(ABC):
    name = "base"
    #: True for strategies that train in the calling process (``single``).
    in_process = False
    #: True for strategies whose ranks may take turns in a shared worker process when
    #: workers outnumber cores (``launch.turns``): every wait is at a shared-memory
    #: collective, and no rank needs another to run at the same time (hogwild's ranks run
    #: side by side by design).
    ranks_take_turns = False

    def __init__(self, config: TrainConfig):
        self.config = config

    def prepare(self, model: nn.Module, data=None, layout=None) -> None:
        """Called before any worker starts (in the parent; under torchrun in every rank):
        put what the workers share next to ``model`` and ``data`` (already shared)."""

    def check(self, data, model: nn.Module, layout) -> None:
        """Refuse, in the parent and before anything starts, what this strategy cannot do
        with this data and model (a ``UserError``)."""

    def replicas_are_private(self, layout) -> bool:
        """Whether each worker trains a model of its own, which it may lay out as it likes
        (channels-last on CPU), rather than tensors other processes share: the layout the
        parent rehearses in before it forks workers (``launch.rehearsal``)."""
        return True

    def batch_sizes(self, data, workers: int) -> list[int]:
        """The sizes of the batches a worker trains on (each a shape torch generates kernels
        for at its first use): the configured batch size unless a strategy knows better
        (fedavg's clients end in last batches of as many sizes as there are clients; those
        are left to the workers)."""
        return [self.config.batch_size]

    def comm_numel(self, model: nn.Module) -> int:
        """How many numbers one rank contributes to the largest collective."""
        return 0

    def shared_tensors(self, model: nn.Module) -> int:
        """How many tensors ``prepare`` and the model put in shared memory (each costs an
        open file per process under the ``file_descriptor`` sharing strategy)."""
        return len(list(model.parameters())) + len(list(model.buffers()))

    @abstractmethod
    def samples_per_round(self, data, workers: int) -> int:
        """Progress units in one round of the whole run: samples of ``data`` for supervised
        strategies, environment steps for RL."""

    @abstractmethod
    def program(self, setup) -> WorkerProgram:
        """This worker's program; ``setup`` is an ``engine.loop.WorkerSetup``."""

    def round_extras(self, reports) -> dict:
        """Strategy-specific columns of one round's metrics, from every rank's report."""
        return {}

    def describe(self, layout) -> list[str]:
        """Banner lines about what this strategy will do."""
        return []
