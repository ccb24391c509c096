"""Data sets the stream loader's tests read (module level: forked and spawned workers find
them): a memory-mapped array in a file, and ones that fail at a known sample."""

from __future__ import annotations

import threading

import numpy as np
import torch
from torch.utils.data import Dataset

FEATURES, CLASSES = 4, 3


def write_rows(path, count: int) -> None:
    rows = np.memmap(path, dtype=np.float32, mode="w+", shape=(count, FEATURES))
    rows[:] = np.random.default_rng(0).standard_normal((count, FEATURES), dtype=np.float32)
    rows.flush()


class MappedRows(Dataset):
    """Rows of a file mapped with ``np.memmap``; ``in_place``: every read checks that this
    process maps the file (the rows were not copied anywhere on the way to the worker)."""

    def __init__(self, path, count: int, in_place: bool = False):
        self.path, self.count, self.in_place = str(path), count, in_place
        self.rows = np.memmap(self.path, dtype=np.float32, mode="r", shape=(count, FEATURES))
        self.targets = np.arange(count) % CLASSES

    def __len__(self):
        return self.count

    def __getitem__(self, index):
        if self.in_place:
            assert isinstance(self.rows, np.memmap)
            with open("/proc/self/maps") as maps:
                assert self.path in maps.read(), "the rows are not read from their file"
        return torch.from_numpy(np.array(self.rows[index])), int(self.targets[index])

    def __getstate__(self):   # spawn: the file is mapped again, not the rows pickled
        return {k: v for k, v in self.__dict__.items() if k != "rows"}

    def __setstate__(self, state):
        self.__init__(state["path"], state["count"], state["in_place"])


class RaisesAt(MappedRows):
    """Raises at sample ``bad`` (only when read in a worker's training, not the parent's
    first looks at samples 0 and the last)."""

    bad = 13

    def __getitem__(self, index):
        if index == self.bad:
            raise ValueError(f"sample {index} is corrupt")
        return super().__getitem__(index)


#: Set by the hang test when it is done: the stuck loader thread then returns.
RELEASE = threading.Event()


class HangsAt(MappedRows):
    bad = 5

    def __getitem__(self, index):
        if index == self.bad:
            RELEASE.wait()
        return super().__getitem__(index)


class Sequences(Dataset):
    """Token sequences of lengths 1 to 6; the class is whether token 1 occurs."""

    def __init__(self, count=40):
        generator = torch.Generator().manual_seed(0)
        self.items = []
        for index in range(count):
            tokens = torch.randint(1, 8, (1 + index % 6,), generator=generator)
            self.items.append((tokens, int((tokens == 1).any())))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        return self.items[index]


class Endless(torch.utils.data.IterableDataset):
    def __iter__(self):
        while True:
            yield torch.zeros(FEATURES), 0


def make_endless():
    return Endless(), None
