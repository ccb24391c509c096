"""A shared-memory board where workers post progress and heartbeats without messages.

Each rank owns one row and is its only writer, so a step costs two stores and no lock; the
parent reads the board a few times a second to drive the progress bar and the hang watchdog.
No ordering between the fields is needed, so plain stores are enough on every CPU: each field
is one aligned 8-byte float, which 64-bit CPUs (x86-64, aarch64, POWER, s390x) store and
load whole, so the parent sees an old value or the new one, never a mix; a value a few
microseconds late only moves a progress bar or a watchdog by as much.

A rank that waits for its peers at a collective marks itself waiting and keeps beating (the
shared-memory group does both while it sleeps), so the watchdog can tell the rank that
stopped from the ranks that wait for it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

_SAMPLES, _BEAT, _WAITING = 0, 1, 2
_ROW = 8  # one 64-byte cache line per rank


@dataclass
class ProgressBoard:
    table: torch.Tensor  # [world, _ROW] float64: samples done, last heartbeat (monotonic s),
    #                      waiting at a collective (1.0) or not (0.0)

    @classmethod
    def create(cls, world_size: int) -> "ProgressBoard":
        table = torch.zeros(world_size, _ROW, dtype=torch.float64)
        table[:, _BEAT] = time.monotonic()
        return cls(table.share_memory_())

    def writer(self, rank: int) -> "BoardWriter":
        return BoardWriter(self.table.numpy()[rank])

    def samples_done(self) -> int:
        return int(self.table[:, _SAMPLES].sum())

    def seconds_since_beat(self) -> list[float]:
        now = time.monotonic()
        return [now - beat for beat in self.table[:, _BEAT].tolist()]

    def waiting_ranks(self) -> list[bool]:
        """Per rank: is it waiting for its peers at a collective right now?"""
        return [flag != 0.0 for flag in self.table[:, _WAITING].tolist()]

    def beat_all(self) -> None:
        """Restart every rank's heartbeat clock (at start-up, before workers exist)."""
        self.table[:, _BEAT] = time.monotonic()


class BoardWriter:
    def __init__(self, row):
        self._row = row

    def counted(self) -> int:
        """The samples this rank has posted since the run started (its reports carry it:
        ``RoundProgress``)."""
        return int(self._row[_SAMPLES])

    def advance(self, samples: int) -> None:
        self._row[_SAMPLES] += samples
        self._row[_BEAT] = time.monotonic()

    def beat(self) -> None:
        self._row[_BEAT] = time.monotonic()

    def waiting(self, at_collective: bool) -> None:
        """Mark this rank as waiting for its peers at a collective, or done waiting."""
        self._row[_WAITING] = 1.0 if at_collective else 0.0
        self._row[_BEAT] = time.monotonic()


class RoundProgress:
    """The progress bar's count within the round: what the board says the ranks have done
    less what their reports already covered.

    Each report carries the rank's board count when it was sent (``RoundReport.counted``),
    not only its round's ``train_samples``: the two differ wherever a rank posted work that
    the round does not count -- a fedavg client that failed or sent a non-finite update, a
    cohort retried client by client -- and a difference carried over would run the bar ahead
    for the rest of the run."""

    def __init__(self, board: ProgressBoard, per_round: int):
        self.board, self.per_round = board, per_round
        self._covered: dict[int, int] = {}   # rank -> its board count at its last report

    def reported(self, rank: int, counted: int) -> None:
        self._covered[rank] = counted

    def in_round(self) -> int:
        done = self.board.samples_done() - sum(self._covered.values())
        return max(0, min(self.per_round, done))
