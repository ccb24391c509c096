"""The shape of a run, decided once in the parent before anything starts: how many
processes, threads each, start method, how workers communicate, how tensors are shared."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from ..comm.dist import TORCH_BACKENDS, DistSpec
from ..comm.shm import ShmGroupState
from ..comm.solo import SoloSpec
from ..config import TrainConfig
from ..errors import UserError
from ..models import model_bytes
from .preflight import check_device, check_model_fits_data, check_workload
from .sharing import check_shm_space, choose_sharing_strategy
from .start_method import choose_start_method
from .tuning import threads_per_worker, usable_cores
from .world import ExternalWorld

#: Strategies that run across processes torchrun starts (hogwild needs one machine's memory).
UNDER_LAUNCHER = ("sync", "ddp", "fedavg")
#: Collectives of torchrun's CPU ranks: shared memory within a node, gloo between nodes.
HIERARCHICAL = "shm+gloo"


@dataclass
class RunLayout:
    """The resolved shape of a run, decided once in the parent and shown in the banner."""

    workers: int
    threads: int
    start_method: str | None
    start_reason: str
    comm: str
    sharing: str | None = None
    sharing_reason: str = ""
    cores: int = 1
    local_workers: int | None = None   # of ``workers``, those on this machine (None: all)
    #: Worker processes when fewer than ``workers``: the ranks take turns in them
    #: (``launch.turns``); None: a process per worker.
    processes: int | None = None

    def ranks_of_processes(self) -> list[list[int]]:
        """The ranks each worker process trains: consecutive runs of equal length
        (``turn_taking_processes`` takes only counts that divide the workers)."""
        size = self.workers // (self.processes or self.workers)
        return [list(range(start, start + size)) for start in range(0, self.workers, size)]


def plan_layout(config: TrainConfig, strategy, world: ExternalWorld | None = None) -> RunLayout:
    if world is not None:
        if config.strategy not in UNDER_LAUNCHER:
            raise UserError(f"strategy {config.strategy!r} cannot run under {world.launcher}: "
                            f"only {', '.join(UNDER_LAUNCHER)} work across processes it starts "
                            "(hogwild needs one machine's shared memory); use --strategy ddp "
                            "or sync")
        local = int(os.environ.get("LOCAL_WORLD_SIZE", world.world_size))
        threads = threads_per_worker(local, config.threads_per_worker)
        return RunLayout(world.world_size, threads, None, f"started by {world.launcher}",
                         launcher_comm(config, local), cores=usable_cores(),
                         local_workers=local)
    workers = config.workers
    threads = threads_per_worker(workers, config.threads_per_worker)
    if strategy.in_process:
        return RunLayout(1, threads, None, "in this process", "none", cores=usable_cores())
    method, reason = choose_start_method(config.start_method, config.device, threads)
    comm, cores = comm_kind(config), usable_cores()
    return RunLayout(workers, threads, method, reason, comm, cores=cores,
                     processes=turn_taking_processes(config, strategy, comm, workers, cores,
                                                     threads))


def turn_taking_processes(config: TrainConfig, strategy, comm: str, workers: int,
                          cores: int, threads: int) -> int | None:
    """With more CPU workers than the cores can run at once, the ranks of a strategy that
    meets at shared-memory collectives (sync, ddp) take turns in one process per core's
    worth of threads rather than a process each (``launch.turns``; figures in
    ``benchmarks/README.md``). Only when the processes get as many ranks each: a process
    with one rank more would make the others wait for it at every barrier. None: a process
    per worker."""
    processes = max(1, cores // threads)
    if not strategy.ranks_take_turns or comm != "shm" or config.device != "cpu" \
            or workers <= processes or workers % processes:
        return None
    return processes


def preflight(config, bundle, model, strategy, layout) -> list[str]:
    """Everything that can be checked before a process starts; returns warnings to show."""
    check_device(config)
    check_model_fits_data(model, bundle)
    warnings = check_workload(config, bundle, layout.workers, layout.cores, model=model,
                              local_workers=layout.local_workers, processes=layout.processes)
    strategy.check(bundle, model, layout)
    if layout.start_method is not None:
        choose_sharing(config, layout, bundle, model, strategy)
    return warnings


def choose_sharing(config, layout, bundle, model, strategy, extra_bytes: int = 0) -> None:
    """Pick the sharing strategy and check /dev/shm before anything is moved there;
    ``extra_bytes``: what else the strategy puts there (an RL run's replay buffer)."""
    shared_count = strategy.shared_tensors(model) + 8  # + data, board, group
    layout.sharing, layout.sharing_reason = choose_sharing_strategy(config.sharing_strategy,
                                                                    shared_count)
    comm_bytes = 2 * layout.workers * strategy.comm_numel(model) * 8
    check_shm_space(bundle.nbytes + model_bytes(model) * 3 + comm_bytes + extra_bytes)


def comm_kind(config: TrainConfig) -> str:
    """How workers talk: shared memory between our own CPU processes, else torch.distributed."""
    if config.strategy == "ddp" and config.ddp_backend != "auto":
        return config.ddp_backend
    if config.device == "cuda" and config.strategy == "ddp":
        return "nccl"
    return "shm"


def launcher_comm(config: TrainConfig, local_ranks: int) -> str:
    """How torchrun's ranks talk: nccl between GPUs; on CPUs, through each node's shared
    memory and gloo between nodes -- unless one rank per node leaves nothing to share, or
    ``--ddp-backend gloo`` asks for a flat gloo group (torch's own DDP) explicitly."""
    if config.device == "cuda":
        return "nccl"
    if local_ranks <= 1 or (config.strategy == "ddp" and config.ddp_backend == "gloo"):
        return "gloo"
    return HIERARCHICAL


def make_comm(config, strategy, model, layout):
    if layout.comm == "shm":
        return shm_group_state(config, strategy, model, layout.workers,
                               oversubscribed=layout.workers > layout.cores)
    if layout.comm in TORCH_BACKENDS:
        return DistSpec(layout.comm, layout.workers, config.worker_timeout)
    return SoloSpec()


def shm_group_state(config, strategy, model, ranks: int, oversubscribed: bool,
                    allocate=None, initialize: bool = True) -> ShmGroupState:
    """The shared-memory group of ``ranks`` processes for this strategy and model: mptrain's
    own workers, or the ranks of one torchrun node (``allocate``/``initialize``: see
    ``ShmGroupState.create``)."""
    numel = max(strategy.comm_numel(model), 2)  # 2: the target-accuracy check
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()),
                 torch.float32)
    return ShmGroupState.create(ranks, numel, dtype, config.worker_timeout, oversubscribed,
                                allocate=allocate, initialize=initialize)
