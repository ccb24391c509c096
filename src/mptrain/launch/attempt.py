"""One attempt at a run, three ways, each the ``train`` of one launcher
(``launch.launchers``): in this process (``single``), on mptrain's own supervised worker
processes, or as one rank of a job started by torchrun."""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass
from typing import Callable

import torch

from ..comm.base import CollectiveTimeout
from ..comm.kind import CommKind
from ..comm.solo import SoloGroup
from ..engine.channels_last import already_channels_last
from ..engine.evaluation import TestSetEvaluation
from ..engine.loop import WorkerSetup, train
from ..environ import environment
from ..errors import UserError, WorkerFailedError
from ..errors import setting_name as named   # as the caller spelled the setting
from . import openmp, rehearsal, warmup
from .board import ProgressBoard, RoundProgress
from .plan import make_comm
from .supervisor import Supervisor
from .tuning import apply_threads, child_environment, release_free_heap, tune_malloc
from .worker import WorkerPlan, worker_entry


@dataclass
class Job:
    """One attempt at training: what to train, how, from which epoch, and where reports go."""

    config: object
    bundle: object
    model: object
    strategy: object
    plan: object          # launch.plan.RunPlan
    presenter: object
    on_report: Callable
    start_round: int = 0
    rank_states: list | None = None       # per rank: optimizer and RNG state to resume from
    checkpoint_every: int | None = None
    #: Work for the parent while its own workers train (it only watches them then); it
    #: must not leave a thread running at the next fork (``warmup`` joins its own).
    while_workers_train: Callable | None = None
    #: How each rank scores a round: a test set, or greedy episodes (``mptrain.rl``).
    evaluation: type = TestSetEvaluation

    def setup(self, rank, group, progress, report, device) -> WorkerSetup:
        return WorkerSetup(rank=rank, config=self.config, data=self.bundle, model=self.model,
                           strategy=self.strategy, group=group, progress=progress,
                           report=report, device=device, start_round=self.start_round,
                           resume_state=_rank_state(self.rank_states, rank),
                           checkpoint_every=self.checkpoint_every,
                           evaluation=self.evaluation, local_workers=self.plan.local_workers)


def _rank_state(states: list | None, rank: int) -> dict | None:
    if not states:
        return None
    return states[rank] if rank < len(states) else {}  # fedavg may resume on more workers


def train_in_process(job: Job) -> None:
    job.bundle.materialize_()
    job.strategy.prepare(job.model, job.bundle, job.plan)
    tune_malloc()
    previous_threads = torch.get_num_threads()
    apply_threads(job.plan.threads)
    try:
        train(job.setup(0, SoloGroup(), InProcessProgress(job.presenter),
                             job.on_report, torch.device(job.config.device)))
    finally:
        torch.set_num_threads(previous_threads)


def train_under_launcher(job: Job, world) -> None:
    """This process is one rank of a torchrun job (its process group already joined, see
    ``launch.torchrun``): the data set once per node, every rank from rank 0's model,
    reports and checkpoint parts gathered to rank 0 only."""
    from . import torchrun

    tune_malloc()
    apply_threads(job.plan.threads)
    if job.config.device == "cuda":
        torch.cuda.set_device(world.local_rank)
        device = torch.device("cuda", world.local_rank)
    else:
        device = torch.device("cpu")
    node = None
    try:
        node = torchrun.discover(world)
        group = torchrun.node_group(job, world, node,
                                    hierarchical=job.plan.comm is CommKind.SHM_GLOO)
        job.strategy.prepare(job.model, job.bundle, job.plan)
        torchrun.start_from_rank0(job.model, group)

        def report(epoch_report):
            for item in torchrun.gather_to_rank0(epoch_report, world) or ():
                job.on_report(item)

        progress = InProcessProgress(job.presenter, scale=world.world_size)
        train(job.setup(world.rank, group, progress, report, device))
    except (RuntimeError, CollectiveTimeout) as err:
        if not torchrun.is_collective_failure(err):
            raise
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise WorkerFailedError(f"rank {world.rank} lost contact with the job: "
                                f"{torchrun.lost_peers(world, node)} ({reason})") from None


def train_on_workers(job: Job) -> None:
    run_plan, config = job.plan, job.config
    # Everything workers share is put in shared memory once, here, before they start.
    job.bundle.share_memory_()
    job.model.share_memory()
    job.strategy.prepare(job.model, job.bundle, run_plan)
    board = ProgressBoard.create(run_plan.workers)
    comm = make_comm(config, job.strategy, job.model, job.bundle, run_plan)
    worker_plan = WorkerPlan(job=job, comm=comm, board=board)
    if run_plan.start_method == "fork":
        # Workers inherit the imports; no thread may be importing at fork.
        warmup.finish(build_optimizer=job.strategy.builds_torch_optimizer)
        if run_plan.threads > 1 and not openmp.can_fork_multithreaded_children():
            raise UserError("this process ran torch on several threads before its workers "
                            f"with {run_plan.threads} threads each could be forked (they would "
                            f"hang: OpenMP is not fork-safe); use {named('start_method')} "
                            "forkserver")
    in_round = RoundProgress(board, job.strategy.samples_per_round(job.bundle,
                                                                   run_plan.workers))

    def on_message(rank, report):
        in_round.reported(report.rank, report.counted)
        job.on_report(report)

    def on_tick():
        job.presenter.update(in_round.in_round())

    processes = run_plan.ranks_of_processes()
    supervisor = Supervisor(run_plan.start_method, heartbeat_timeout_s=config.worker_timeout,
                            seconds_since_beat=board.seconds_since_beat,
                            waiting_ranks=board.waiting_ranks,
                            on_message=on_message, on_tick=on_tick,
                            on_started=job.while_workers_train,
                            ranks_of_processes=processes if run_plan.processes else None)
    try:
        if run_plan.start_method == "fork":
            _prepare_to_fork(job)
            # Forked workers share the parent's Python objects copy-on-write; a collection
            # in a worker writes to every object header it visits and copies those pages.
            # Frozen objects are never visited, so they stay shared.
            gc.freeze()
        board.beat_all()   # what the parent did before the start is not a worker's silence
        with environment(child_environment(run_plan.threads)):
            outcome = supervisor.run(worker_entry,
                                     [(worker_plan, ranks) for ranks in processes])
    finally:
        gc.unfreeze()
        worker_plan.comm.release()   # the rendezvous folder of gloo/nccl groups
    if not outcome.ok:
        raise WorkerFailedError(describe_failures(outcome.failures), outcome.failures)


def _prepare_to_fork(job: Job) -> None:
    """What forked workers should inherit rather than each build for themselves."""
    run_plan, config = job.plan, job.config
    processes = run_plan.processes or run_plan.workers
    needs = job.strategy.needs(job.model, job.bundle, run_plan)
    # A rehearsal at the workers' thread count would start OpenMP threads in this process,
    # after which workers with several threads could not be forked safely (``openmp``).
    if needs.rehearse and run_plan.threads == 1 and \
            rehearsal.worth_rehearsing(processes, run_plan.cores, config.device):
        rehearsal.rehearse_first_steps(job.model, job.bundle, config, run_plan.threads,
                                       channels_last=needs.private_replicas
                                       or already_channels_last(job.model),
                                       batch_sizes=list(needs.batch_sizes))
    release_free_heap()


def describe_failures(failures) -> str:
    lines = ["training failed: " + "; ".join(f.describe() for f in failures)]
    for failure in failures:
        if failure.traceback:
            lines.append(f"--- where {failure.who()} was stuck when stopped ---"
                         if failure.reason == "hung" else
                         f"--- traceback of {failure.who()} ---")
            lines.append(failure.traceback.rstrip())
    return "\n".join(lines)


class InProcessProgress:
    """Progress for ``single``: throttled updates of the presenter, no shared memory."""

    def __init__(self, presenter, scale: int = 1):
        self._presenter = presenter
        self._scale = scale  # under torchrun, rank 0 stands for every rank's progress
        self._done = 0
        self._last = 0.0
        self._epoch_start = time.monotonic()

    def advance(self, samples: int) -> None:
        self._done += samples * self._scale
        now = time.monotonic()
        if now - self._last > 0.1:
            self._last = now
            self._presenter.update(self._done)

    def counted(self) -> None:
        """Nothing to reconcile: no board, and the count starts again every round."""
        return None

    def beat(self) -> None:
        self._done = 0
