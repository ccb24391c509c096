"""The entry point of every worker process, and what it receives."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from .tuning import apply_threads, tune_malloc


@dataclass
class WorkerPlan:
    """Everything a worker needs; under spawn it is pickled once, at start, with its shared
    tensors sent as handles (never the data itself)."""

    job: object           # launch.execute.Job (its presenter and callback stay behind)
    comm: object          # has attach(rank) -> comm.Group
    board: object         # launch.board.ProgressBoard

    def __getstate__(self):
        # The parent's presenter (a live terminal display) and its callbacks must not
        # travel: spawn would try to pickle them.
        state = dict(self.__dict__)
        state["job"] = dataclasses.replace(self.job, presenter=None, on_report=None,
                                           while_workers_train=None)
        return state


def worker_entry(rank: int, channel, plan: WorkerPlan) -> None:
    tune_malloc()
    apply_threads(plan.job.layout.threads)
    device = worker_device(rank, plan.job.config.device)
    progress = plan.board.writer(rank)
    # The group marks this rank "waiting" on the board while it sleeps at a collective, so
    # a hang is blamed on the rank that stopped, not on the ranks waiting for it.
    group = plan.comm.attach(rank, progress)
    plan.job.driver(plan.job.setup(rank, group, progress, channel.send, device))
    group.close()


def worker_device(rank: int, device_type: str) -> torch.device:
    if device_type == "cuda":
        index = rank % torch.cuda.device_count()
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return torch.device("cpu")
