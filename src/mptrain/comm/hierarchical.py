"""Collectives for ranks on several nodes: shared memory within a node, torch.distributed
between one leader per node.

A flat gloo all-reduce over every rank sends every rank's numbers through loopback TCP and
gloo's threads, even between two ranks of the same machine. Here the ranks of a node first
average through their shared buffer (microseconds, no thread), only the node leaders (local
rank 0) all-reduce over the network -- one participant per node instead of one per rank --
and each leader hands the result back through shared memory.

Every rank ends with the bitwise same numbers: the node means are equal within a node
(``ShmGroup`` reduces each chunk once), gloo's all-reduce gives every leader the same sum, and
the leaders' result reaches their node by broadcast.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from .base import Group
from .dist import gather_rows_padded
from .shm import ShmGroup


@dataclass(frozen=True)
class Topology:
    """Which global ranks share a node, from what every rank said about itself."""

    nodes: tuple[tuple[int, ...], ...]   # per node (ordered by torchrun's group rank): ranks

    @classmethod
    def from_ranks(cls, node_of_rank: list[int]) -> "Topology":
        """``node_of_rank[r]``: the node (torchrun's GROUP_RANK) global rank ``r`` runs on."""
        grouped: dict[int, list[int]] = {}
        for rank, node in enumerate(node_of_rank):
            grouped.setdefault(node, []).append(rank)
        return cls(tuple(tuple(grouped[node]) for node in sorted(grouped)))

    def node_index(self, rank: int) -> int:
        return next(i for i, ranks in enumerate(self.nodes) if rank in ranks)

    def local_rank(self, rank: int) -> int:
        return self.nodes[self.node_index(rank)].index(rank)

    @property
    def leaders(self) -> list[int]:
        return [ranks[0] for ranks in self.nodes]


class HierarchicalGroup(Group):
    """``local``: this node's shared-memory group; ``leaders``: the process group of the
    node leaders (None for a single node, or on a rank that is not a leader)."""

    def __init__(self, rank: int, topology: Topology, local: ShmGroup, leaders=None):
        self.rank = rank
        self.world_size = sum(len(ranks) for ranks in topology.nodes)
        self.topology = topology
        self._local = local
        self._leaders = leaders
        self._node = topology.node_index(rank)
        self._node_size = len(topology.nodes[self._node])

    @property
    def is_leader(self) -> bool:
        return self._local.rank == 0

    def barrier(self) -> None:
        self._local.barrier()
        if self._leaders is not None:
            dist.barrier(group=self._leaders)
        self._local.barrier()

    def average_(self, tensors) -> None:
        self._local.average_(tensors)
        if len(self.topology.nodes) == 1:
            return
        if self._leaders is not None:
            flat = _flatten_dense_tensors([t.detach() for t in tensors])
            flat.mul_(self._node_size)           # node mean -> node sum
            dist.all_reduce(flat, group=self._leaders)
            flat.div_(self.world_size)
            for tensor, value in zip(tensors, _unflatten_dense_tensors(flat, tensors)):
                tensor.detach().copy_(value)
        self._local.broadcast_(tensors, src=0)

    def collective_bytes(self) -> int:
        return self._local.collective_bytes()

    def gather_rows(self, rows, counts, receive=None) -> int:
        """Over torch.distributed's default group, every rank of the job (torchrun's, which
        formed it): rows bound for one rank would cross the node's shared memory a slot
        (one model) at a time, a collective each, then the leaders; one gloo gather moves
        them all. Without a default group (a group built by hand) the broadcasts."""
        if not dist.is_initialized():
            return super().gather_rows(rows, counts, receive)
        return gather_rows_padded(rows, counts, self.rank, self.world_size, receive)

    def broadcast_(self, tensors, src: int = 0) -> None:
        source_node = self.topology.node_index(src)
        if self._node == source_node:
            self._local.broadcast_(tensors, src=self.topology.local_rank(src))
        if len(self.topology.nodes) == 1:
            return
        if self._leaders is not None:
            flat = _flatten_dense_tensors([t.detach() for t in tensors])
            dist.broadcast(flat, src=self.topology.leaders[source_node], group=self._leaders)
            for tensor, value in zip(tensors, _unflatten_dense_tensors(flat, tensors)):
                tensor.detach().copy_(value)
        self._local.broadcast_(tensors, src=0)

