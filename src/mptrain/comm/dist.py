"""Collectives over torch.distributed: for torchrun, several nodes, and CUDA (nccl)."""

from __future__ import annotations

import datetime
import os
import shutil
import socket
import tempfile
from typing import Sequence

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from ..leftovers import RENDEZVOUS_PREFIX
from .base import Group, Receive, counts_per_block, row_starts

#: The most bytes rank 0 receives in one gather (every rank's block of rows, padded to the
#: longest): what it holds at once beyond the caller's own memory, whatever the rows.
GATHER_BYTES = 64 << 20


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

    def gather_rows(self, rows, counts, receive=None) -> int:
        return gather_rows_padded(rows, counts, self.rank, self.world_size, receive)

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


def gather_buffer_rows(longest: int, row_bytes: int, world_size: int) -> int:
    """The rows of one gather's block (``gather_rows_padded``): every rank holds one
    block, padded, and rank 0 one more per rank to receive into."""
    return min(longest, counts_per_block(world_size * row_bytes, GATHER_BYTES))


def gather_rows_padded(rows: torch.Tensor, counts: Sequence[int], rank: int, world_size: int,
                       receive: Receive | None = None) -> int:
    """``Group.gather_rows`` over torch.distributed's default group (every rank of the
    job): each ``dist.gather`` takes up to ``per_block`` rows
    of every rank, padded to the same count (a gather's tensors are of one size; the
    padding is never handed on), ``per_block`` as many as keep the gather within
    ``GATHER_BYTES`` at rank 0 -- one collective for a round of a few hundred 2NN clients
    on a few ranks. Returns the collectives it took."""
    width = rows.shape[1]
    longest = max(counts, default=0)
    per_block = gather_buffer_rows(longest, width * rows.element_size(), world_size)
    block = torch.zeros(per_block, width, dtype=rows.dtype)
    landing = [torch.empty_like(block) for _ in range(world_size)] if rank == 0 else None
    firsts = row_starts(counts)
    calls = 0
    for start in range(0, longest, max(1, per_block)):
        mine = rows[start:start + per_block]
        block[:len(mine)] = mine
        dist.gather(block, landing, dst=0)
        calls += 1
        if rank == 0 and receive is not None:
            for sender, received in enumerate(landing):
                valid = min(per_block, counts[sender] - start)
                if valid > 0:
                    receive(firsts[sender] + start, received[:valid])
    return calls


#: The torch.distributed backends mptrain's own workers can form a group with (``DistSpec``),
#: against mptrain's shared-memory group.
TORCH_BACKENDS = ("gloo", "nccl")


class DistSpec:
    """Picklable recipe for a torch.distributed group between mptrain's own processes.

    The ranks meet through a file store in a fresh private folder, not a TCP port: a port
    found free by the parent can be taken by another process before rank 0 binds it, and a
    file needs nothing listening on the network. ``release`` removes the folder.

    gloo's own connections listen on loopback: by default gloo binds the address the host
    name resolves to, which on many machines is one the whole network reaches, and these
    ranks all run here.
    """

    def __init__(self, backend: str, world_size: int, timeout_s: float):
        self.backend = backend
        self.world_size = world_size
        self.timeout_s = timeout_s
        # Named after this process: ``mptrain doctor --clean`` removes the folder of a
        # parent that was SIGKILLed before it could.
        self.folder = tempfile.mkdtemp(prefix=f"{RENDEZVOUS_PREFIX}{os.getpid()}-")

    def attach(self, rank: int, progress=None) -> TorchDistGroup:
        # torch.distributed waits inside its own calls; there is no board to mark.
        if self.backend == "gloo":
            bind_gloo_to_loopback()
        return TorchDistGroup.init(self.backend, rank, self.world_size, self.timeout_s,
                                   init_method=f"file://{self.folder}/store")

    def release(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def loopback_interface() -> str | None:
    """The name of this machine's loopback interface (``lo`` on Linux, ``lo0`` elsewhere)."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return None
    return next((name for name in names if name.startswith("lo")), None)


def bind_gloo_to_loopback(environ=os.environ) -> None:
    """Make the gloo groups this process creates listen on loopback only.

    torch reads GLOO_SOCKET_IFNAME when it creates a gloo group (``init_process_group``
    passes no device options through): set here, in a worker of mptrain's own, it concerns
    that worker's groups alone. A user's GLOO_SOCKET_IFNAME is overridden: every rank of such
    a group is on this machine.
    """
    name = loopback_interface()
    if name is not None:
        environ["GLOO_SOCKET_IFNAME"] = name
