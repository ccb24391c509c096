"""Numbers handed out once each to whichever process asks first: hogwild's batch queue.

Ranks that train from fixed, equal shards finish an epoch together only if their cores give
them equal time; on a VM one vCPU routinely gets 5-8% less than the other over an epoch, and
the faster rank then waits for the slower one at the epoch's end
(benchmarks/results/notebook-2026-11-26.md, issue 24). A rank that takes the epoch's next
batch from a shared counter instead trains as many batches as its core allows, and the
ranks finish within one batch of each other.

A counter is read and incremented under a lock: a process-shared POSIX semaphore that lives
in the same shared memory (``comm.shm`` explains why those are available to processes
started any way, and fast when nobody waits: ``sem_trywait`` is a user-space
compare-and-swap). ``sem_wait`` acquires and ``sem_post`` releases memory, as POSIX requires
of them on every CPU (aarch64 included), so the count a process wrote before ``sem_post`` is
the count the next process to take the lock reads. The lock is held for one read and one
write, so a process that finds it taken sleeps only in the rare case that it was taken just
then.
"""

from __future__ import annotations

import ctypes
import os

import torch

from .shm import _SEM_BYTES, _load_or_refuse, _shared_bytes

_LOCK_SLICE_S = 0.25   # a process that finds the lock taken looks again at least this often


class SharedTickets:
    """``slots`` counters in shared memory (one per epoch, say), each handing out 0, 1, 2,
    ... to whichever process asks, every number exactly once.

    Created in the parent before its workers start; workers inherit it (fork) or receive it
    pickled (its two tensors travel as shared-memory handles). A counter is never reset, so
    a slot must not be reused: give each epoch its own.
    """

    def __init__(self, counters: torch.Tensor, lock: torch.Tensor):
        self._counters = counters   # int64 [slots], shared
        self._lock = lock           # uint8 [_SEM_BYTES], shared: the sem_t

    @classmethod
    def create(cls, slots: int) -> "SharedTickets":
        libc = _load_or_refuse()
        lock = _shared_bytes(_SEM_BYTES)
        if libc.init(lock.data_ptr(), 1, 1) != 0:
            raise RuntimeError("process-shared semaphores are not available here (sem_init: "
                               f"{os.strerror(ctypes.get_errno())}); hogwild's shared batch "
                               "queue needs one")
        return cls(_shared_bytes(max(1, slots) * 8).view(torch.int64), lock)

    def take(self, slot: int) -> int:
        """The next number of counter ``slot``; no other caller, in any process, gets it."""
        libc = _load_or_refuse()
        lock = ctypes.c_void_p(self._lock.data_ptr())
        while libc.trywait(lock) != 0 and not libc.wait_for(lock, _LOCK_SLICE_S):
            pass   # taken by a process reading and writing one number: look again
        try:
            counters = self._counters.numpy()
            ticket = int(counters[slot])
            counters[slot] = ticket + 1
        finally:
            libc.post(lock)
        return ticket
