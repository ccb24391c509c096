"""The entry point of every worker process, and what it receives."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Sequence

import torch

from ..engine.loop import train
from .tuning import apply_threads, tune_malloc


@dataclass
class WorkerPlan:
    """Everything a worker needs; under spawn it is pickled once, at start, with its shared
    tensors sent as handles (never the data itself)."""

    job: object           # launch.attempt.Job (its presenter and callback stay behind)
    comm: object          # has attach(rank) -> comm.Group
    board: object         # launch.board.ProgressBoard

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
    tune_malloc()
    apply_threads(plan.job.plan.threads)
    processes = plan.job.plan.processes
    if processes is None:
        _train_rank(ranks[0], channel, plan)
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
                           worker_device(rank, plan.job.config.device)),
            counts_faults=rank == ranks[0])
        turns.add(rank, functools.partial(train, setup), progress)
    turns.run()
    for group in groups:
        group.close()


def _train_rank(rank: int, channel, plan: WorkerPlan) -> None:
    device = worker_device(rank, plan.job.config.device)
    progress = plan.board.writer(rank)
    # The group marks this rank "waiting" on the board while it sleeps at a collective, so
    # a hang is blamed on the rank that stopped, not on the ranks waiting for it.
    group = plan.comm.attach(rank, progress)
    train(plan.job.setup(rank, group, progress, channel.send, device))
    group.close()


def worker_device(rank: int, device_type: str) -> torch.device:
    if device_type == "cuda":
        index = rank % torch.cuda.device_count()
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return torch.device("cpu")
