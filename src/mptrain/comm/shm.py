"""Collectives through shared memory for the processes of one run on one machine.

Why not gloo here: on a 2-core machine gloo's communication threads and loopback TCP compete
with compute for the same cores every step, which halves DDP throughput. A shared buffer and
a barrier that spins briefly, then sleeps in the kernel, costs microseconds and starts no
thread.

**Why it is correct on every CPU, not only x86.** Every hand-off between processes goes
through a POSIX semaphore that lives in the shared buffer (``sem_init`` with ``pshared=1``).
POSIX lists ``sem_post``, ``sem_wait``, ``sem_trywait`` and ``sem_timedwait`` among the
functions that synchronise memory (XBD 4.12), and glibc and musl implement them with
release/acquire atomics (``stlr``/``ldar`` or ``dmb`` on aarch64, fences on POWER): whatever
a rank wrote before ``sem_post`` is visible to the rank whose wait takes that token
(``sem_clockwait`` is ``sem_timedwait`` with another clock, same atomics). The barrier is a
dissemination barrier: in round ``k`` rank ``r`` posts to rank ``r + 2**k`` and takes a
token from rank ``r - 2**k``, so after ``ceil(log2(world))`` rounds a chain of such hand-offs
leads from every rank's arrival to every rank's departure. Each (sender, receiver, round) has
its own counting semaphore, so a token from the next barrier can only be taken as the next
barrier's token. The data themselves are copied with plain torch stores and loads; they need
no atomicity because, between two barriers, each byte is written by at most one rank and read
only after the next barrier. The per-rank arrival counters are diagnostics (the timeout
message), never used for ordering. Nothing here relies on x86's store order.

**Layout.** ``slots[rank]`` holds each rank's contribution, ``results[parity]`` the reduced or
broadcast values; tensors are packed by dtype (float64 buffers stay float64, integer buffers
travel exactly). ``average_`` is a reduce-scatter then all-gather through shared memory:
everyone writes its slot, barrier, rank ``r`` reduces chunk ``r`` of every slot into the
result, barrier, everyone reads the result: every rank gets the bitwise-same mean, since
each chunk is reduced once and read by all. Each rank reads ``numel``
values instead of ``world * numel``: with 32 workers the reduction no longer dominates a step.
Results alternate between two parities, which is what makes that enough: a rank writes a
result parity again only after passing a barrier that every rank reaches after reading it,
and writes its slot again only after the barrier that follows every chunk's reduction.

**Waiting.** A waiting rank first tries ``sem_trywait`` (a user-space compare-and-swap, no
system call) for about as long as a sleep and wake-up would cost, then sleeps in
``sem_clockwait`` (a futex), so it gives its core to the rank it waits for; ``sem_post``
makes a system call only when someone sleeps. With more workers than cores it does not spin:
spinning would steal the core of the rank being waited for. It gives its core away a few
times (``sched_yield``: the rank it waits for may be the one that runs next, which keeps
back-to-back collectives of 4-8 workers on 2 cores cheap), then sleeps, so hundreds of
waiting ranks cost nothing. A sleeping rank wakes a few times a second to beat its heartbeat
and marks itself waiting on the progress board (when it has one), so the supervisor blames
the rank that stopped, not the ranks waiting for it.

**Ranks that take turns.** When a process hosts several ranks (``launch.turns``, with more
workers than cores), its ranks meet locally, one after another in the same thread, and the
last of them takes the dissemination barrier for the process, with the other processes as
its members (the first rows of semaphores). What every rank of a process wrote before its
turn ended is then published by that one ``sem_post``, and read after the matching wait by
every rank of the other processes: the same chain of hand-offs, with fewer links.

Where process-shared semaphores do not exist (not Linux), ``create`` refuses with one line.
"""

from __future__ import annotations

import ctypes
import errno
import math
import os
import time
from dataclasses import dataclass

import torch

from ..errors import setting_name as named   # as the caller spelled the setting
from .base import CollectiveTimeout, Group
from .reduce import mean_of_rows

_SEM_BYTES = 128        # room for a sem_t: 32 bytes on glibc, 128 on musl (64-bit)
_ALIGN = 64             # one cache line: chunks reduced by different ranks never share one
_ROW_ALIGN = 4096
_COUNTER_STRIDE = 8     # one int64 arrival counter per cache line
# ~0.5 us per sem_trywait through ctypes: about 100 us of trying before sleeping, the order of
# a futex sleep plus wake-up.
_SPIN_TRIES = 200
# With more workers than cores, a waiting rank first gives its core away a few times
# (sched_yield: the rank it waits for may be the one that runs), then sleeps.
_YIELDS = 8
_SLEEP_SLICE_S = 0.25   # a sleeping rank beats its heartbeat this often


def _supervised_margin_s(timeout_s: float) -> float:
    """How much longer than ``timeout_s`` a rank that keeps beating waits at a barrier.

    The supervisor stops a peer that made no progress for ``timeout_s`` and names it; a
    waiting rank that gave up first would be blamed instead. It still gives up a margin
    later, for peers that are alive but never come (a rank that skipped a collective).
    """
    return max(2.0, 0.25 * timeout_s)


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Semaphores:
    """libc's process-shared semaphores, through ctypes (loaded once per process)."""

    _loaded: "_Semaphores | None" = None

    def __init__(self):
        libc = ctypes.CDLL(None, use_errno=True)
        pointer = [ctypes.c_void_p]
        self.init = _function(libc, "sem_init", [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint])
        self.post = _function(libc, "sem_post", pointer)
        self.trywait = _function(libc, "sem_trywait", pointer)
        wait_args = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(_Timespec)]
        if hasattr(libc, "sem_clockwait"):  # glibc >= 2.30: immune to wall-clock jumps
            self._clockwait = _function(libc, "sem_clockwait", wait_args)
            self._clock = time.CLOCK_MONOTONIC
        else:
            self._clockwait = None
            self._timedwait = _function(libc, "sem_timedwait", wait_args[::2])
            self._clock = time.CLOCK_REALTIME

    @classmethod
    def load(cls) -> "_Semaphores":
        if cls._loaded is None:
            cls._loaded = cls()
        return cls._loaded

    def wait_for(self, semaphore, seconds: float) -> bool:
        """Take a token, sleeping at most ``seconds``; False when the time ran out."""
        deadline = time.clock_gettime(self._clock) + seconds
        spec = _Timespec(int(deadline), int((deadline % 1) * 1e9))
        if self._clockwait is not None:
            code = self._clockwait(semaphore, self._clock, ctypes.byref(spec))
        else:
            code = self._timedwait(semaphore, ctypes.byref(spec))
        if code == 0:
            return True
        err = ctypes.get_errno()
        if err in (errno.ETIMEDOUT, errno.EINTR):
            return False
        raise OSError(err, f"waiting on a shared-memory semaphore: {os.strerror(err)}")


def _function(library, name, argtypes):
    function = getattr(library, name)
    function.argtypes = argtypes
    function.restype = ctypes.c_int
    return function


def _shared_bytes(*shape: int) -> torch.Tensor:
    """A zeroed uint8 tensor in shared memory whose pages are committed only when touched
    (``share_memory_()`` on an existing tensor would write every page)."""
    storage = torch.UntypedStorage._new_shared(max(1, math.prod(shape)))
    return torch.empty(0, dtype=torch.uint8).set_(storage).view(*shape)


@dataclass
class ShmGroupState:
    """The shared tensors of a group, created in the parent and inherited or pickled to workers."""

    slots: torch.Tensor       # uint8 [world, row_bytes]: each rank's contribution
    results: torch.Tensor     # uint8 [2, row_bytes]: reduced or broadcast values, by parity
    semaphores: torch.Tensor  # uint8 [world, rounds, _SEM_BYTES]: sem_t, one per receiver/round
    arrivals: torch.Tensor    # int64 [world, _COUNTER_STRIDE]: barriers entered (diagnostics)
    timeout_s: float
    oversubscribed: bool

    @classmethod
    def create(cls, world_size: int, numel: int, dtype: torch.dtype, timeout_s: float,
               oversubscribed: bool, allocate=None, initialize: bool = True
               ) -> "ShmGroupState":
        """Room for collectives of up to ``numel`` elements of any dtype up to 8 bytes wide
        (``dtype``, when wider, widens it); only the bytes actually used take memory.

        ``allocate(*shape)`` gives zeroed shared uint8 tensors (default: anonymous shared
        memory for workers this process starts). Ranks it does not start (torchrun's) map the
        same buffers by name: one of them creates the state, the others call this with
        ``initialize=False`` and the same arguments, so that they map the buffers in the same
        order and leave the semaphores as the creator set them up.
        """
        allocate = allocate or _shared_bytes
        itemsize = max(8, torch.empty(0, dtype=dtype).element_size())
        row_bytes = _round_up(max(numel, 1) * itemsize + 4 * _ALIGN, _ROW_ALIGN)
        rounds = _rounds(world_size)
        semaphores = allocate(world_size, max(rounds, 1), _SEM_BYTES)
        libc = _load_or_refuse()
        for rank in range(world_size if initialize else 0):
            for round_ in range(rounds):
                if libc.init(_address(semaphores, rank, round_), 1, 0) != 0:
                    err = ctypes.get_errno()
                    raise RuntimeError(f"process-shared semaphores are not available here "
                                       f"(sem_init: {os.strerror(err)}); shared-memory "
                                       "collectives need them")
        arrivals = allocate(world_size, _COUNTER_STRIDE * 8).view(torch.int64)
        return cls(allocate(world_size, row_bytes), allocate(2, row_bytes),
                   semaphores, arrivals, timeout_s, oversubscribed)

    def attach(self, rank: int, progress=None, turns=None) -> "ShmGroup":
        """This rank's handle. ``progress`` (a board writer: ``beat()``, ``waiting(bool)``)
        is beaten while the rank sleeps at a barrier, and told when it waits. ``turns``
        (``launch.turns.Turns``): this rank takes turns with other ranks in its process,
        which meets the other processes at barriers on behalf of all of them."""
        return ShmGroup(self, rank, progress, turns)

    def release(self) -> None:
        """Nothing to remove: the buffers go with the last process that maps them."""


@dataclass
class WaitCounts:
    """How this rank's barrier waits ended (without sleeping, or after sleeping), and the
    seconds they took: waiting for the slowest rank (the step profile's "waiting",
    ``engine.profile``)."""

    spun: int = 0
    slept: int = 0
    seconds: float = 0.0


@dataclass
class _Packing:
    """Where each tensor of one collective's list goes: one segment per dtype."""

    slot_views: list       # per tensor: its place in this rank's slot, shaped like it
    result_views: list     # per parity, per tensor: its place in the result
    my_chunks: list        # per segment: (slots [world, chunk] view, results per parity)


class ShmGroup(Group):
    def __init__(self, state: ShmGroupState, rank: int, progress=None, turns=None):
        self.rank = rank
        self._turns = turns
        self.world_size = state.slots.shape[0]
        self._state = state
        self._libc = _Semaphores.load()
        self._progress = progress
        self._limit_s = state.timeout_s + (_supervised_margin_s(state.timeout_s)
                                           if progress is not None else 0.0)
        # Ranks that take turns in a process meet the other processes, at most one per
        # core: waiting for a token by trying for a while pays there.
        oversubscribed = state.oversubscribed and turns is None
        self._spin_tries = 0 if oversubscribed else _SPIN_TRIES
        self._yields = _YIELDS if oversubscribed else 0
        self._arrivals = state.arrivals.numpy()[:, 0]
        self._generation = int(self._arrivals[rank])
        # The barrier's members: the ranks, or the processes when ranks take turns in them
        # (the first ``processes`` rows of semaphores then belong to the processes).
        member, members = (rank, self.world_size) if turns is None \
            else (turns.process, turns.processes)
        # Round k: post to member + 2**k, take from own semaphore (posted by member - 2**k).
        self._rounds = [(ctypes.c_void_p(_address(state.semaphores,
                                                  (member + (1 << k)) % members, k)),
                         ctypes.c_void_p(_address(state.semaphores, member, k)))
                        for k in range(_rounds(members))]
        self._parity = 0
        self._packings: dict = {}
        self.waits = WaitCounts()

    # -- collectives -------------------------------------------------------------------------

    def barrier(self) -> None:
        arrived = time.perf_counter()
        self._generation += 1
        self._arrivals[self.rank] = self._generation  # diagnostics only (see module doc)
        if self._turns is not None:
            self._turns.arrive(self._disseminate)
        else:
            self._disseminate()
        self.waits.seconds += time.perf_counter() - arrived

    def _disseminate(self) -> None:
        """The dissemination barrier between this group's members (see the module doc)."""
        slept_since = None
        for post_to, take_from in self._rounds:
            self._libc.post(post_to)
            if self._try(take_from):
                continue
            if slept_since is None:
                slept_since = time.monotonic()
                self._mark_waiting(True)
            self._sleep_until_taken(take_from, slept_since)
        if slept_since is None:
            self.waits.spun += 1
        else:
            self.waits.slept += 1
            self._mark_waiting(False)

    def average_(self, tensors) -> None:
        if self.world_size == 1:
            return   # the mean of one rank is itself: no copies (sync x1 spent 4% of a step)
        packing, parity = self._reduce_my_chunks(tensors)
        self.barrier()
        for tensor, place in zip(tensors, packing.result_views[parity]):
            tensor.copy_(place)

    def _reduce_my_chunks(self, tensors) -> tuple[_Packing, int]:
        """Everyone writes its slot, barrier, this rank reduces its chunk of every segment
        into the result of the parity returned."""
        packing = self._packing(tensors)
        parity = self._next_parity()
        for tensor, place in zip(tensors, packing.slot_views):
            place.copy_(tensor)
        self.barrier()
        for slots, results in packing.my_chunks:
            if slots.shape[1]:
                mean_of_rows(slots, results[parity])
        return packing, parity

    def chunk_bounds(self, numel: int, itemsize: int) -> tuple[int, int]:
        """The elements ``[low, high)`` of a collective of ``numel`` that this rank reduces
        (cache-line aligned chunks, one per rank; the last ones may be short or empty)."""
        chunk = _round_up(-(-numel // self.world_size), _ALIGN // itemsize)
        return min(numel, self.rank * chunk), min(numel, (self.rank + 1) * chunk)

    def mean_of_my_chunk(self, tensors) -> torch.Tensor:
        """The first half of :meth:`average_`: everyone writes its slot, barrier, this rank
        reduces its chunk (``chunk_bounds``) of the tensors laid end to end, one dtype; the
        mean of that chunk is returned, flat, and nobody else's is read.

        The caller must pass a :meth:`barrier` before the next collective: until then the
        other ranks may still be reading its slot. ``strategies.sharded_step`` steps the
        optimizer on the chunk between the two.
        """
        if len({t.dtype for t in tensors}) != 1:
            raise ValueError("mean_of_my_chunk takes tensors of one dtype")
        packing, parity = self._reduce_my_chunks(tensors)
        _, results = packing.my_chunks[0]
        return results[parity]

    def collective_bytes(self) -> int:
        """A slot's bytes, less the alignment of up to four dtypes' segments (``_plan``)."""
        return self._state.slots.shape[1] - 4 * _ALIGN

    def broadcast_(self, tensors, src: int = 0) -> None:
        if self.world_size == 1:
            return
        packing = self._packing(tensors)
        parity = self._next_parity()
        places = packing.result_views[parity]
        if self.rank == src:
            for tensor, place in zip(tensors, places):
                place.copy_(tensor)
        self.barrier()
        if self.rank != src:
            for tensor, place in zip(tensors, places):
                tensor.copy_(place)

    # -- waiting -----------------------------------------------------------------------------

    def _try(self, semaphore) -> bool:
        trywait = self._libc.trywait
        if trywait(semaphore) == 0:
            return True
        for _ in range(self._spin_tries):
            if trywait(semaphore) == 0:
                return True
        for _ in range(self._yields):
            os.sched_yield()
            if trywait(semaphore) == 0:
                return True
        return False

    def _sleep_until_taken(self, semaphore, since: float) -> None:
        while not self._libc.wait_for(semaphore, min(_SLEEP_SLICE_S, self._limit_s)):
            waited = time.monotonic() - since
            if waited > self._limit_s:
                self._mark_waiting(False)
                raise CollectiveTimeout(
                    f"rank {self.rank} waited {waited:.0f} s at a barrier for "
                    f"{self._late_ranks()}; raise {named('worker_timeout')} if a step really "
                    "takes that long")
            if self._turns is not None:
                self._turns.beat_all()   # every rank of this process waits here
            elif self._progress is not None:
                self._progress.beat()

    def _late_ranks(self) -> str:
        """The ranks that have not reached this rank's current barrier yet."""
        late = [r for r in range(self.world_size) if self._arrivals[r] < self._generation]
        return f"rank(s) {late}"

    def _mark_waiting(self, waiting: bool) -> None:
        if self._progress is not None:
            self._progress.waiting(waiting)

    # -- packing -----------------------------------------------------------------------------

    def _next_parity(self) -> int:
        parity = self._parity
        self._parity ^= 1
        return parity

    def _packing(self, tensors) -> _Packing:
        key = tuple((t.dtype, tuple(t.shape)) for t in tensors)
        packing = self._packings.get(key)
        if packing is None:
            packing = self._packings[key] = self._plan(tensors)
        return packing

    def _plan(self, tensors) -> _Packing:
        """Lay the tensors out by dtype: segment after segment, each cache-line aligned."""
        by_dtype: dict = {}
        for index, tensor in enumerate(tensors):
            by_dtype.setdefault(tensor.dtype, []).append(index)
        slots, results = self._state.slots, self._state.results
        slot_views, result_views = [None] * len(tensors), [[None] * len(tensors) for _ in
                                                           range(2)]
        my_chunks, start = [], 0
        for dtype, indices in by_dtype.items():
            itemsize = torch.empty(0, dtype=dtype).element_size()
            numel = sum(tensors[i].numel() for i in indices)
            end = start + numel * itemsize
            if end > slots.shape[1]:
                raise ValueError(f"a collective of {end} bytes does not fit the group's "
                                 f"{slots.shape[1]}-byte slots")
            mine = slots[self.rank, start:end].view(dtype)
            theirs = [results[p, start:end].view(dtype) for p in range(2)]
            offset = 0
            for i in indices:
                size, shape = tensors[i].numel(), tensors[i].shape
                slot_views[i] = mine[offset:offset + size].view(shape)
                for p in range(2):
                    result_views[p][i] = theirs[p][offset:offset + size].view(shape)
                offset += size
            low, high = self.chunk_bounds(numel, itemsize)
            segment = slots[:, start:end].view(dtype)[:, low:high]
            my_chunks.append((segment, [theirs[p][low:high] for p in range(2)]))
            start = _round_up(end, _ALIGN)
        return _Packing(slot_views, result_views, my_chunks)


def _load_or_refuse() -> _Semaphores:
    try:
        return _Semaphores.load()
    except (OSError, AttributeError) as err:
        raise RuntimeError(f"process-shared semaphores are not available here ({err}); "
                           "shared-memory collectives need them") from None


def _rounds(world_size: int) -> int:
    return (world_size - 1).bit_length()  # ceil(log2(world)); 0 for a world of one


def _address(semaphores: torch.Tensor, rank: int, round_: int) -> int:
    return semaphores[rank, round_].data_ptr()


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple
