"""The entry point of every worker process, and what it receives."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..engine.loop import WorkerSetup, train
from .tuning import apply_threads, tune_malloc


@dataclass
class WorkerPlan:
    """Everything a worker needs; under spawn it is pickled once, at start, with its shared
    tensors sent as handles (never the data itself)."""

    config: object
    data: object
    model: object
    strategy: object
    comm: object          # has attach(rank) -> comm.Group
    board: object         # launch.board.ProgressBoard
    threads: int
    start_epoch: int = 0


def worker_entry(rank: int, channel, plan: WorkerPlan) -> None:
    tune_malloc()
    apply_threads(plan.threads)
    device = worker_device(rank, plan.config.device)
    group = plan.comm.attach(rank)
    train(WorkerSetup(rank=rank, config=plan.config, data=plan.data, model=plan.model,
                      strategy=plan.strategy, group=group, progress=plan.board.writer(rank),
                      report=channel.send, device=device, start_epoch=plan.start_epoch))
    group.close()


def worker_device(rank: int, device_type: str) -> torch.device:
    if device_type == "cuda":
        index = rank % torch.cuda.device_count()
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return torch.device("cpu")
