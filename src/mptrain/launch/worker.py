"""The entry point of every worker process, and what it receives."""

from __future__ import annotations

import dataclasses
import functools
import gc
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from ..engine.loop import train
from ..errors import current_spelling, spelled
from .tuning import apply_threads, tune_malloc


@dataclass
class WorkerPlan:
    """Everything a worker needs; under spawn it is pickled once, at start, with its shared
    tensors sent as handles (never the data itself)."""

    job: object           # launch.attempt.Job (its presenter and callback stay behind)
    comm: object          # has attach(rank) -> comm.Group
    board: object         # launch.board.ProgressBoard
    #: How the caller names settings (``--workers``, or fit()'s ``workers``), for the
    #: messages a worker raises: a spawned worker does not inherit the parent's context.
    spelling: Callable[[str], str] = field(default_factory=current_spelling)

    def __getstate__(self):
        # The parent's presenter (a live terminal display) and its callbacks must not
        # travel: spawn would try to pickle them.
        state = dict(self.__dict__)
        state["job"] = dataclasses.replace(self.job, presenter=None, on_report=None,
                                           while_workers_train=None)
        return state


def worker_entry(index: int, channel, plan: WorkerPlan, ranks: Sequence[int]) -> None:
    """Worker process ``index``: trains ``ranks`` -- its own rank, or several that take
    turns in it (``launch.turns``)."""
    with spelled(plan.spelling):
        _train_ranks(index, channel, plan, ranks)


def _train_ranks(index: int, channel, plan: WorkerPlan, ranks: Sequence[int]) -> None:
    tune_malloc()
    apply_threads(plan.job.plan.threads)
    processes = plan.job.plan.processes
    if processes is None:
        _train_rank(ranks[0], channel, plan)
        _let_go_of_received_cuda_tensors(plan)
        return
    from .turns import Turns   # greenlet: only where ranks take turns

    turns = Turns(index, processes)
    groups = []
    for rank in ranks:
        progress = plan.board.writer(rank)
        group = plan.comm.attach(rank, progress, turns=turns)
        groups.append(group)
        setup = dataclasses.replace(
            plan.job.setup(rank, group, progress, channel.send,
                           worker_device(rank, plan)),
            counts_faults=rank == ranks[0])
        # A greenlet runs in a context of its own: each turn names settings as the caller.
        turns.add(rank, functools.partial(_train_spelled, plan.spelling, setup), progress)
    turns.run()
    for group in groups:
        group.close()
    _let_go_of_received_cuda_tensors(plan)


def _train_spelled(spelling, setup) -> None:
    with spelled(spelling):
        train(setup)


def _let_go_of_received_cuda_tensors(plan: WorkerPlan) -> None:
    """Drop this worker's last references to the tensors it received before it exits.

    CUDA tensors that came through IPC (hogwild's shared parameters) tell their producer,
    the parent, that they are released only when their last reference dies; a worker that
    exits holding them leaves the parent warning at its own exit that they never were.
    The plan is also referenced by this process's ``Process`` object, so it is emptied, not
    just forgotten."""
    if plan.job.config.device != "cuda":
        return
    plan.job = None
    gc.collect()


def _train_rank(rank: int, channel, plan: WorkerPlan) -> None:
    device = worker_device(rank, plan)
    progress = plan.board.writer(rank)
    # The group marks this rank "waiting" on the board while it sleeps at a collective, so
    # a hang is blamed on the rank that stopped, not on the ranks waiting for it.
    group = plan.comm.attach(rank, progress)
    train(plan.job.setup(rank, group, progress, channel.send, device))
    group.close()


def worker_device(rank: int, plan: WorkerPlan) -> torch.device:
    """Rank ``rank``'s GPU, round robin over the visible ones -- or, for a strategy whose
    ranks train one shared set of tensors, the GPU those live on (the parent's current one)."""
    if plan.job.config.device == "cuda":
        index = 0 if plan.job.strategy.ranks_share_one_device \
            else rank % torch.cuda.device_count()
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return torch.device("cpu")
