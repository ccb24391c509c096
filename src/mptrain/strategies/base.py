"""What every strategy is: a small parent-side class that owns its worker program and
declares its own facts.

The facts are class attributes the rest of the house reads instead of comparing names: the
unit its work is counted in, the settings it uses of those only some strategies use, whether
it runs in the calling process or under torchrun, whether a checkpoint of it resumes on
another number of workers. The parent asks an instance what it needs before workers start
(:meth:`Strategy.needs`), to put what workers share in shared memory (``prepare``) and how
much work one round is (``samples_per_round``, for the progress bar). In each worker,
``program`` builds the :class:`WorkerProgram` that does one round of work at a time (an
epoch for ``sync``/``ddp``, a round of sampled clients for ``fedavg``). Everything around the
rounds -- evaluation, checkpoint parts, reports, progress, supervision -- is shared
(``engine.loop``) and never rewritten per strategy.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Mapping

import torch
import torch.nn as nn

from ..comm.kind import CommKind
from ..report.console import metric_parts

from ..data.defaults import TrainingDefaults

if TYPE_CHECKING:   # the config module asks the strategies about settings
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
    #: The program's own reason to make this round the run's last (fedavg: the next round
    #: would spend more privacy than --target-epsilon allows). Every rank says the same.
    last: bool = False


def host_memory_comm(torchrun_local_ranks: int | None) -> CommKind:
    """How ranks exchange tensors that live in host memory: mptrain's own processes through
    shared memory; under torchrun each node's shared memory and gloo between nodes, or gloo
    alone where one rank per node leaves nothing to share."""
    if torchrun_local_ranks is None:
        return CommKind.SHM
    return CommKind.GLOO if torchrun_local_ranks <= 1 else CommKind.SHM_GLOO


@dataclass(frozen=True)
class ResourceNeeds:
    """What the parent sizes and prepares before workers start, answered once per run."""

    #: Numbers one rank contributes to the largest collective (sizes the shared buffers).
    comm_numel: int
    #: Tensors ``prepare`` and the model put in shared memory (each costs an open file per
    #: process under the ``file_descriptor`` sharing strategy).
    shared_tensors: int
    #: The batch sizes a worker trains on (each a shape torch generates kernels for at its
    #: first use): what the parent rehearses before it forks workers (``launch.rehearsal``).
    batch_sizes: tuple[int, ...] = ()
    #: Whether each worker trains a model of its own, which it may lay out as it likes
    #: (channels-last on CPU), rather than tensors other processes share.
    private_replicas: bool = True
    #: Whether the parent's rehearsal of the first steps fits this strategy's workers.
    rehearse: bool = True
    #: Bytes the strategy puts in /dev/shm beyond the model, data and collectives.
    extra_shared_bytes: int = 0
    #: Copies of the parameters each rank holds in its own memory: by default a replica,
    #: its gradients and up to two optimizer states (Adam); fewer when the parameters or
    #: the optimizer state live once in shared memory (the memory preflight's estimate).
    private_parameter_copies: int = 4


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

    def close(self) -> None:
        """Release what the program opened (an RL actor's environments), at the end of its
        rounds, stopped early or failed."""


class Strategy(ABC):
    name: ClassVar[str] = "base"
    #: ``supervised`` (``mptrain run --strategy``) or ``rl`` (``mptrain rl --algo``).
    family: ClassVar[str] = "supervised"
    #: What one unit of the run's work is called: an ``epoch`` over the data, or a ``round``.
    unit: ClassVar[str] = "epoch"
    #: Why ``--compile`` on a GPU records no CUDA graphs for this strategy, or None where it
    #: does (``engine.compiling``).
    no_cuda_graphs: ClassVar[str | None] = None
    #: Of the settings only some strategies use (``config.RESTRICTED_SETTINGS``), those this
    #: one does; the others are refused when given, rather than silently ignored.
    settings: ClassVar[frozenset[str]] = frozenset()
    #: For a refused setting, what to use instead (default: the strategies that use it),
    #: settings in braces (``{rounds}``) so that each caller is told its own spelling.
    instead: ClassVar[Mapping[str, str]] = {}
    #: Workers when the user does not say.
    default_workers: ClassVar[int] = 2
    #: True for strategies that train in the calling process (``single``, ``dp``).
    in_process: ClassVar[bool] = False
    #: False for strategies that are always one worker (``single``): the bench runs them once
    #: per workload and passes them no --workers (``dp``'s count is its GPUs).
    takes_worker_count: ClassVar[bool] = True
    #: True for strategies whose ranks may be processes torchrun starts (hogwild needs one
    #: machine's shared memory).
    runs_under_torchrun: ClassVar[bool] = False
    #: True when a checkpoint resumes on another number of workers (no per-rank state).
    resumes_on_other_worker_counts: ClassVar[bool] = False
    #: True for strategies whose ranks may take turns in a shared worker process when
    #: workers outnumber cores (``launch.turns``): every wait is at a shared-memory
    #: collective, and no rank needs another to run at the same time (hogwild's ranks run
    #: side by side by design).
    ranks_take_turns: ClassVar[bool] = False
    #: True for strategies whose ranks all train tensors of one process (hogwild's shared
    #: parameters, reaching workers through CUDA IPC): every rank computes on the device
    #: those tensors live on, not on a GPU of its own.
    ranks_share_one_device: ClassVar[bool] = False
    #: False for strategies whose workers build no ``torch.optim`` optimizer (the RL
    #: strategies step their own Adam): the parent then does not pay the import of
    #: ``torch._dynamo`` before forking (``launch.warmup``: the one answer to its cost).
    builds_torch_optimizer: ClassVar[bool] = True

    def __init__(self, config: TrainConfig):
        self.config = config
        #: The run's --out folder (None without one), set before ``check``: where a
        #: strategy may keep what does not fit in memory (fedavg's SCAFFOLD variates).
        self.out_dir: Path | None = None

    # -- facts about settings, asked before any instance exists ---------------------------------
    @classmethod
    def recommended(cls, defaults: TrainingDefaults) -> dict[str, Any]:
        """The data set's recommended settings for this strategy."""
        values = defaults.common()
        values["sync_every"] = None
        return values

    @classmethod
    def default_worker_count(cls) -> int:
        """Workers when the user does not say (``dp``: the visible GPUs)."""
        return cls.default_workers

    @classmethod
    def check_config(cls, config: TrainConfig) -> None:
        """Refuse combinations of settings this strategy cannot run (a ``UserError``)."""

    @classmethod
    def units(cls, config: TrainConfig) -> int:
        """How many units of work the run has."""
        return config.epochs

    @classmethod
    def comm_kind(cls, config: TrainConfig, torchrun_local_ranks: int | None) -> CommKind:
        """How this strategy's ranks talk: through shared memory between mptrain's own CPU
        processes; under torchrun nccl between GPUs, on CPUs each node's shared memory and
        gloo between nodes -- unless one rank per node leaves nothing to share."""
        if torchrun_local_ranks is not None and config.device == "cuda":
            return CommKind.NCCL
        return host_memory_comm(torchrun_local_ranks)

    def batches_from_a_queue(self, workers: int) -> bool:
        """True when ``workers`` take an epoch's batches from one shared queue rather than
        each a fixed shard (hogwild): what the workload check counts."""
        return False

    # -- the parent's side of a run ------------------------------------------------------------
    def check(self, data, model: nn.Module, plan) -> None:
        """Refuse, in the parent and before anything starts, what this strategy cannot do
        with this data and model (a ``UserError``). Changes nothing."""

    #: The resumed checkpoint's settings (``check_resumable``), empty for a new run.
    resumed_settings: Mapping[str, Any] = MappingProxyType({})

    def inherited(self, name: str, value) -> bool:
        """Whether ``value`` of setting ``name`` is the resumed checkpoint's own: a run
        written before a refusal of it existed resumes as it trained, since its user cannot
        unsay what the checkpoint says (``--target-accuracy`` has no value meaning
        "none"). A refusal that reads the data asks this before refusing."""
        return name in self.resumed_settings and self.resumed_settings[name] == value

    def resuming_from(self, resume) -> None:
        """Refuse a checkpoint this run cannot continue (a ``UserError``), in the parent
        before any process starts -- here, or in ``check`` where the data is needed:
        fedbuff's updates in flight, when the settings that shape its schedule changed. By
        default every checkpoint of the strategy resumes. (Not ``check_resume``: the RL
        algorithms' classmethod of that name takes the config too.)"""

    def prepare(self, model: nn.Module, data=None, plan=None) -> None:
        """Called before any worker starts (in the parent; under torchrun in every rank):
        put what the workers share next to ``model`` and ``data`` (already shared)."""

    def finish(self, model: nn.Module) -> None:
        """After training, in the parent, whatever happened: give the caller's ``model``
        back as it came (hogwild laid it out for its workers)."""

    def needs(self, model: nn.Module, data, plan) -> ResourceNeeds:
        """What to size and prepare for this strategy's workers (see :class:`ResourceNeeds`)."""
        return ResourceNeeds(comm_numel=0, shared_tensors=model_tensor_count(model),
                             batch_sizes=(self.config.batch_size,))

    @abstractmethod
    def samples_per_round(self, data, workers: int) -> int:
        """Progress units in one round of the whole run: samples of ``data`` for supervised
        strategies, environment steps for RL."""

    @abstractmethod
    def program(self, setup) -> WorkerProgram:
        """This worker's program; ``setup`` is an ``engine.loop.WorkerSetup``."""

    # -- what the run says about itself ----------------------------------------------------------
    def round_extras(self, reports) -> dict:
        """Strategy-specific columns of one round's metrics, from every rank's report."""
        return {}

    def round_line(self, metrics) -> list[str]:
        """What a round's console line shows after ``epoch 3/10``."""
        return metric_parts(metrics)

    def round_notes(self, metrics) -> list[str]:
        """Lines the user must see after a round, even with --quiet."""
        return []

    def summary_fields(self) -> dict:
        """Strategy-specific entries of summary.json."""
        return {}

    def describe(self, plan, model) -> list[str]:
        """Banner lines about what this strategy will do."""
        return []


def model_tensor_count(model: nn.Module) -> int:
    return len(list(model.parameters())) + len(list(model.buffers()))


def visible_gpus() -> int:
    """GPUs this process may use (CUDA_VISIBLE_DEVICES respected); asks NVML, so CUDA is not
    initialised in the parent by asking."""
    return torch.cuda.device_count()
