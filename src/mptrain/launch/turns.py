"""Several ranks in one worker process, taking turns between collectives.

Why: with far more workers than cores, a process per rank spends the machine on being many
processes. 64 sync workers on 2 cores ran at ~0.84x the 2-worker throughput, and profiles
put the loss in per-process costs, not in the training itself: each process faulted in the
data set's pages and its own heap, started every step on caches the others had filled, and
every barrier put 64 processes to sleep and woke them, several times over. Ranks that take
turns in one process per core share one heap, one mapping of the data and warm caches, and
a barrier costs the processes one exchange of tokens (``benchmarks/oversubscription.py``
has the figures).

How: each hosted rank runs the unchanged driver in a greenlet of its own (a coroutine with
its own stack; a switch costs about a microsecond and never leaves the thread). A rank runs
until it reaches a barrier, then hands the turn to the next rank of its process that has
not reached it. The last of them to arrive takes the barrier for the whole process, with
the other processes (``comm.shm``), and every rank of the process goes on from there in
turn. The data of a collective still go through each rank's own slot, so every rank
computes what it would in a process of its own: with mptrain's models and data, the same
values bit for bit (``tests/launch/test_turns.py``).

What a rank keeps to itself across turns: torch's global random generator (dropout draws
from it, and a checkpoint saves it) and whether gradients are enabled; its replica,
optimizer and shard are its own objects. Python's ``random`` and numpy's global generators
are the process's, shared by its ranks: a model that draws from them gets other numbers
than with a process per rank. A rank must not reach a barrier inside
``torch.inference_mode`` (a thread-wide mode that cannot be handed over); none of mptrain's
collectives are called there.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Callable

import greenlet
import torch


class HostedRankFailed(Exception):
    """A hosted rank raised: names the rank, since its process hosts others too (the
    supervisor reads it back: ``supervisor.HOSTED_FAILURE``)."""


@dataclass
class _Rank:
    rank: int
    runner: greenlet.greenlet
    progress: object                  # board writer: beat(), waiting(bool)
    rng: torch.Tensor
    grad_enabled: bool = True


class Turns:
    """The ranks of one worker process and whose turn it is (see the module docstring)."""

    def __init__(self, process: int, processes: int):
        """This is worker process ``process`` of ``processes``, all of which host ranks."""
        self.process, self.processes = process, processes
        self._ranks: list[_Rank] = []
        self._by_runner: dict = {}
        self._ready: deque[_Rank] = deque()     # may run: not at a barrier, not finished
        self._arrived: list[_Rank] = []         # at the current barrier, in arrival order
        self._live = 0                          # not finished
        self._main: greenlet.greenlet | None = None

    def add(self, rank: int, body: Callable[[], None], progress) -> None:
        """Host ``rank``: ``body()`` runs its whole driver; ``progress`` is its board row."""
        def run():
            try:
                body()
            except greenlet.GreenletExit:   # collected unfinished: not a failure of its own
                raise
            except BaseException as err:  # noqa: BLE001 - named, then raised on
                # One line: the supervisor reads the rank back from the exception's line.
                first = str(err).strip().splitlines()[0] if str(err).strip() else ""
                raise HostedRankFailed(f"rank {rank}: {type(err).__name__}: {first}") from err

        runner = greenlet.greenlet(run)
        entry = _Rank(rank, runner, progress, torch.get_rng_state())
        # A rank that is not running waits for another (the supervisor then blames the
        # rank that runs, should the process stop).
        progress.waiting(True)
        self._ranks.append(entry)
        self._by_runner[runner] = entry
        self._ready.append(entry)
        self._live += 1

    def run(self) -> None:
        """Run every hosted rank to its end; the first rank that raises ends the process."""
        self._main = greenlet.getcurrent()
        rng, grad_enabled = torch.get_rng_state(), torch.is_grad_enabled()
        try:
            while self._ready:
                self._switch_in(self._ready.popleft())
            if self._live:
                raise RuntimeError(f"ranks {[e.rank for e in self._arrived]} wait at a "
                                   "barrier that no rank of their process can complete")
        finally:   # the caller's own generator and mode, whatever the ranks did
            torch.set_rng_state(rng)
            torch.set_grad_enabled(grad_enabled)

    def arrive(self, process_barrier: Callable[[], None]) -> None:
        """The calling rank has reached a barrier: wait for the other ranks of this process;
        the last of them runs ``process_barrier()`` (the barrier between processes) for all."""
        entry = self._by_runner[greenlet.getcurrent()]
        if torch.is_inference_mode_enabled():
            raise RuntimeError("a rank that takes turns cannot reach a barrier inside "
                               "torch.inference_mode")
        self._arrived.append(entry)
        if len(self._arrived) < self._live:
            self._switch_out(entry)   # back once the last rank has taken the barrier
            return
        arrived, self._arrived = self._arrived, []
        entry.progress.waiting(True)   # with the whole process, for the other processes
        try:
            process_barrier()
        finally:
            self._ready.extend(other for other in arrived if other is not entry)
            entry.progress.waiting(False)

    def beat_all(self) -> None:
        """Every hosted rank is alive (the process waits for the others on their behalf)."""
        for entry in self._ranks:
            if not entry.runner.dead:
                entry.progress.beat()

    def _switch_in(self, entry: _Rank) -> None:
        torch.set_rng_state(entry.rng)
        torch.set_grad_enabled(entry.grad_enabled)
        entry.progress.waiting(False)
        entry.runner.switch()
        if entry.runner.dead:
            self._live -= 1
        # Waiting for another rank, or, finished, for the process to end: not the one to
        # blame should the process stop.
        entry.progress.waiting(True)

    def _switch_out(self, entry: _Rank) -> None:
        entry.rng = torch.get_rng_state()
        entry.grad_enabled = torch.is_grad_enabled()
        self._main.switch()
