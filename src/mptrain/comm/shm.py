"""Collectives through shared memory for the processes of one run on one machine.

Why not gloo here: on a 2-core machine gloo's communication threads and loopback TCP compete
with compute for the same cores every step, which halves DDP throughput. A shared buffer and
a barrier that spins briefly, then yields, costs microseconds and starts no thread.

Layout: ``slots[parity, rank, :]`` holds each rank's contribution. Collectives alternate
between two parities, which is what makes one barrier per collective enough: a rank can only
write parity ``p`` again after passing the next barrier, and every rank reaches that barrier
only after it has finished reading parity ``p``.

The protocol relies on stores becoming visible in program order (x86-64's TSO; each flag and
each slot is written by one rank only, so no atomic read-modify-write is needed).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import torch

from .base import CollectiveTimeout, Group
from .reduce import mean_in_rank_order

# One flag per 64-byte cache line, so ranks spinning on flags do not invalidate each other's.
_FLAG_STRIDE = 8
_SPINS_BEFORE_YIELD = 1_000
_YIELD_SECONDS_BEFORE_SLEEP = 0.002
_SLEEP_SECONDS = 0.0002


@dataclass
class ShmGroupState:
    """The shared tensors of a group, created in the parent and inherited or pickled to workers."""

    slots: torch.Tensor   # [2, world, numel]
    flags: torch.Tensor   # [world, _FLAG_STRIDE] int64
    timeout_s: float
    oversubscribed: bool

    @classmethod
    def create(cls, world_size: int, numel: int, dtype: torch.dtype, timeout_s: float,
               oversubscribed: bool) -> "ShmGroupState":
        slots = torch.zeros(2, world_size, max(numel, 1), dtype=dtype).share_memory_()
        flags = torch.zeros(world_size, _FLAG_STRIDE, dtype=torch.int64).share_memory_()
        return cls(slots, flags, timeout_s, oversubscribed)

    @property
    def nbytes(self) -> int:
        return self.slots.numel() * self.slots.element_size() + self.flags.numel() * 8

    def attach(self, rank: int) -> "ShmGroup":
        return ShmGroup(self, rank)


class ShmGroup(Group):
    def __init__(self, state: ShmGroupState, rank: int):
        self.rank = rank
        self.world_size = state.slots.shape[1]
        self._slots = state.slots
        self._flags = state.flags.numpy()[:, 0]
        self._scratch = torch.empty(state.slots.shape[2], dtype=state.slots.dtype)
        self._timeout_s = state.timeout_s
        # With more workers than cores a spinning rank steals the core of the rank it waits
        # for, so it must give the core away at once.
        self._spin_limit = 0 if state.oversubscribed else _SPINS_BEFORE_YIELD
        self._generation = int(self._flags[rank])
        self._parity = self._generation % 2

    def barrier(self) -> None:
        self._generation += 1
        generation = self._generation
        flags = self._flags
        flags[self.rank] = generation
        spins = 0
        waiting_since = None
        while flags.min() < generation:
            spins += 1
            if spins <= self._spin_limit:
                continue
            now = time.monotonic()
            if waiting_since is None:
                waiting_since = now
            waited = now - waiting_since
            if waited > self._timeout_s:
                late = [r for r in range(self.world_size) if flags[r] < generation]
                raise CollectiveTimeout(
                    f"rank {self.rank} waited {waited:.0f} s at a barrier for rank(s) {late}; "
                    "raise --worker-timeout if a step really takes that long")
            if waited < _YIELD_SECONDS_BEFORE_SLEEP:
                os.sched_yield()
            else:
                time.sleep(_SLEEP_SECONDS)

    def average_(self, tensors) -> None:
        slots = self._next_slots()
        numel = self._write(slots[self.rank], tensors)
        self.barrier()
        result = mean_in_rank_order(slots[:, :numel], self._scratch[:numel])
        self._read(result, tensors)

    def broadcast_(self, tensors, src: int = 0) -> None:
        slots = self._next_slots()
        if self.rank == src:
            self._write(slots[src], tensors)
        self.barrier()
        if self.rank != src:
            self._read(slots[src], tensors)

    def _next_slots(self) -> torch.Tensor:
        slots = self._slots[self._parity]
        self._parity ^= 1
        return slots

    @staticmethod
    def _write(row: torch.Tensor, tensors) -> int:
        offset = 0
        for tensor in tensors:
            size = tensor.numel()
            row[offset:offset + size].copy_(tensor.reshape(-1))
            offset += size
        return offset

    @staticmethod
    def _read(row: torch.Tensor, tensors) -> None:
        offset = 0
        for tensor in tensors:
            size = tensor.numel()
            tensor.copy_(row[offset:offset + size].view_as(tensor))
            offset += size
