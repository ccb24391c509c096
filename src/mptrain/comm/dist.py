"""Collectives over torch.distributed: for torchrun, several nodes, and CUDA (nccl)."""

from __future__ import annotations

import datetime

import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from .base import Group


class TorchDistGroup(Group):
    """Wraps the default process group; ``init`` uses a bounded timeout, never gloo's 30 min."""

    def __init__(self):
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()

    @classmethod
    def init(cls, backend: str, rank: int, world_size: int, timeout_s: float,
             init_method: str | None = None) -> "TorchDistGroup":
        if not dist.is_initialized():
            dist.init_process_group(backend, init_method=init_method, rank=rank,
                                    world_size=world_size,
                                    timeout=datetime.timedelta(seconds=timeout_s))
        return cls()

    def barrier(self) -> None:
        dist.barrier()

    def average_(self, tensors) -> None:
        flat = _flatten_dense_tensors([t.detach() for t in tensors])
        dist.all_reduce(flat)
        flat.div_(self.world_size)
        for tensor, averaged in zip(tensors, _unflatten_dense_tensors(flat, tensors)):
            tensor.detach().copy_(averaged)

    def broadcast_(self, tensors, src: int = 0) -> None:
        flat = _flatten_dense_tensors([t.detach() for t in tensors])
        dist.broadcast(flat, src)
        for tensor, value in zip(tensors, _unflatten_dense_tensors(flat, tensors)):
            tensor.detach().copy_(value)

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


class DistSpec:
    """Picklable recipe for a torch.distributed group between mptrain's own processes."""

    def __init__(self, backend: str, world_size: int, timeout_s: float, port: int | None = None):
        self.backend = backend
        self.world_size = world_size
        self.timeout_s = timeout_s
        self.port = port if port is not None else free_port()

    def attach(self, rank: int) -> TorchDistGroup:
        return TorchDistGroup.init(self.backend, rank, self.world_size, self.timeout_s,
                                   init_method=f"tcp://127.0.0.1:{self.port}")


def free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
