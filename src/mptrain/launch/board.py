"""A shared-memory board where workers post progress and heartbeats without messages.

Each rank owns one row and is its only writer, so a step costs two stores and no lock; the
parent reads the board a few times a second to drive the progress bar and the hang watchdog.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

_SAMPLES, _BEAT = 0, 1
_ROW = 8  # one 64-byte cache line per rank


@dataclass
class ProgressBoard:
    table: torch.Tensor  # [world, _ROW] float64: samples done, last heartbeat (monotonic s)

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

    def beat_all(self) -> None:
        """Restart every rank's heartbeat clock (at start-up, before workers exist)."""
        self.table[:, _BEAT] = time.monotonic()


class BoardWriter:
    def __init__(self, row):
        self._row = row

    def advance(self, samples: int) -> None:
        self._row[_SAMPLES] += samples
        self._row[_BEAT] = time.monotonic()

    def beat(self) -> None:
        self._row[_BEAT] = time.monotonic()
