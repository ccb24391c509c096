"""The shape of a run, decided once in the parent before anything starts: how many
processes, threads each, start method, how workers communicate, how tensors are shared.
A :class:`RunPlan` is made by the launcher that owns the run's processes
(``launch.launchers``) and never changes afterwards."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

import torch

from ..comm.dist import DistSpec
from ..comm.kind import CommKind
from ..comm.shm import ShmGroupState
from ..comm.solo import SoloSpec
from ..config import TrainConfig
from ..engine.precision import precision_warnings
from ..errors import setting_name
from ..models import model_bytes
from ..data.batch_transform import check_batch_transform
from ..data.ragged import check_collated
from .preflight import (check_device, check_model_fits_data, check_model_trains,
                        check_target_accuracy, check_workload, data_warnings,
                        thread_warnings)
from .sharing import check_shm_space, choose_sharing_strategy
from .start_method import choose_start_method
from .tuning import thread_cap, threads_per_worker, usable_cores
from .world import ExternalWorld


@dataclass(frozen=True)
class RunPlan:
    """The resolved shape of a run, shown in the banner."""

    workers: int
    threads: int
    start_method: str | None    # None: mptrain starts no process
    start_reason: str
    comm: CommKind
    cores: int = 1
    sharing: str | None = None
    sharing_reason: str = ""
    local_workers: int | None = None   # of ``workers``, those on this machine (None: all)
    #: Worker processes when fewer than ``workers``: the ranks take turns in them
    #: (``launch.turns``); None: a process per worker.
    processes: int | None = None
    #: Whether global rank 0 runs on this machine (always with mptrain's own workers; under
    #: torchrun only on the first node): what rank 0 alone holds is checked only here.
    rank_zero_here: bool = True

    def ranks_of_processes(self) -> list[list[int]]:
        """The ranks each worker process trains: consecutive runs of equal length
        (``turn_taking_processes`` takes only counts that divide the workers)."""
        size = self.workers // (self.processes or self.workers)
        return [list(range(start, start + size)) for start in range(0, self.workers, size)]


def plan_in_process(config: TrainConfig, data=None) -> RunPlan:
    cores = usable_cores()
    threads = without_loader_threads(threads_per_worker(1, config.threads_per_worker, cores),
                                     config, data)
    return RunPlan(1, threads, None, "in this process", CommKind.NONE, cores=cores)


def plan_workers(config, strategy, model, data) -> RunPlan:
    """mptrain's own worker processes on this machine."""
    workers, cores = config.workers, usable_cores()
    threads = threads_per_worker(workers, config.threads_per_worker, cores)
    comm = strategy.comm_kind(config, None)
    processes = turn_taking_processes(config, strategy, comm, workers, cores, threads)
    threads = without_loader_threads(thread_cap(threads, processes or workers, cores),
                                     config, data)
    method, reason = choose_start_method(config.start_method, config.device, threads)
    plan = RunPlan(workers, threads, method, reason, comm, cores=cores, processes=processes)
    needs = strategy.needs(model, data, plan)
    sharing, why = choose_sharing_strategy(config.sharing_strategy,
                                           needs.shared_tensors + 8)  # + data, board, group
    return replace(plan, sharing=sharing, sharing_reason=why)


def without_loader_threads(threads: int, config, data) -> int:
    """A worker's thread budget less its loader threads (``--loader stream``): they read
    and collate beside the training thread, on the same cores (one left to torch at
    least)."""
    from ..data.stream import loader_threads

    return max(1, threads - loader_threads(config, data))


def plan_under_launcher(config, strategy, world: ExternalWorld, data=None) -> RunPlan:
    """Ranks an external launcher (torchrun) started, this process one of them."""
    check_device(config.device)   # before joining: nccl without a GPU is a traceback
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world.world_size))
    cores = usable_cores()
    threads = without_loader_threads(thread_cap(
        threads_per_worker(local, config.threads_per_worker, cores), local, cores),
        config, data)
    return RunPlan(world.world_size, threads, None, f"started by {world.launcher}",
                   strategy.comm_kind(config, local), cores=cores,
                   local_workers=local, rank_zero_here=world.node == 0)


def turn_taking_processes(config: TrainConfig, strategy, comm: CommKind, workers: int,
                          cores: int, threads: int) -> int | None:
    """With more CPU workers than the cores can run at once, the ranks of a strategy that
    meets at shared-memory collectives (sync, ddp) take turns in one process per core's
    worth of threads rather than a process each (``launch.turns``; figures in
    ``benchmarks/README.md``). Only when the processes get as many ranks each: a process
    with one rank more would make the others wait for it at every barrier. None: a process
    per worker."""
    processes = max(1, cores // threads)
    if not strategy.ranks_take_turns or comm is not CommKind.SHM or config.device != "cpu" \
            or workers <= processes or workers % processes:
        return None
    return processes


def preflight(config, bundle, model, strategy, plan: RunPlan) -> list[str]:
    """Everything that can be checked before a process starts; returns warnings to show."""
    check_device(config.device)
    check_model_trains(model)
    check_collated(bundle)
    check_model_fits_data(model, bundle)
    check_target_accuracy(config, bundle, strategy)
    check_batch_transform(config, bundle)
    warnings = check_workload(config, bundle, plan.workers, plan.cores, model=model,
                              local_workers=plan.local_workers, processes=plan.processes,
                              parameter_copies=strategy.needs(model, bundle, plan)
                              .private_parameter_copies,
                              queued_batches=strategy.batches_from_a_queue(plan.workers))
    warnings += data_warnings(bundle)
    warnings += thread_warnings(config.threads_per_worker, plan.threads,
                                plan.processes or plan.local_workers or plan.workers,
                                plan.cores)
    warnings += precision_warnings(config.precision, config.device)
    strategy.check(bundle, model, plan)
    check_shared_memory(bundle, model, strategy, plan)
    return warnings


def check_shared_memory(data, model, strategy, plan: RunPlan) -> None:
    """Refuse now, with the fix, what /dev/shm cannot hold for mptrain's own workers: the
    data, the model (and the strategy's copies of it), the collectives' buffers."""
    if plan.start_method is None:
        return
    needs = strategy.needs(model, data, plan)
    comm_bytes = 2 * plan.workers * needs.comm_numel * 8
    check_shm_space(data.nbytes + model_bytes(model) * 3 + comm_bytes
                    + needs.extra_shared_bytes, other_fix=_streaming_fix(data))


def _streaming_fix(data) -> str | None:
    """The other way out for stacked data (``--loader auto`` may have sized it by a sample
    that was no measure of the rest): read it where it lies, and /dev/shm holds its targets
    only."""
    from ..data.stream import StreamDataset

    train = getattr(data, "train", None)   # RL has no data set
    if train is None or isinstance(train, StreamDataset) or getattr(train, "on_demand", False):
        return None
    return f"{setting_name('loader')} stream (the data read where it lies)"


def make_comm(config, strategy, model, data, plan: RunPlan):
    if plan.comm is CommKind.SHM:
        return shm_group_state(config, strategy.needs(model, data, plan).comm_numel, model,
                               plan.workers, oversubscribed=plan.workers > plan.cores)
    if plan.comm.is_torch_group:
        return DistSpec(plan.comm.value, plan.workers, config.worker_timeout)
    return SoloSpec()


def shm_group_state(config, comm_numel: int, model, ranks: int, oversubscribed: bool,
                    allocate=None, initialize: bool = True) -> ShmGroupState:
    """The shared-memory group of ``ranks`` processes for ``comm_numel`` numbers per rank:
    mptrain's own workers, or the ranks of one torchrun node (``allocate``/``initialize``:
    see ``ShmGroupState.create``)."""
    numel = max(comm_numel, 2)  # 2: the target-accuracy check
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()),
                 torch.float32)
    return ShmGroupState.create(ranks, numel, dtype, config.worker_timeout, oversubscribed,
                                allocate=allocate, initialize=initialize)
