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


class Endless(torch.utils.data.IterableDataset):
    def __iter__(self):
        while True:
            yield torch.zeros(FEATURES), 0


def make_endless():
    return Endless(), None


class Rescaled(Dataset):
    """A ``targets`` attribute that says other things than the samples (torchvision's
    ``target_transform``: the raw classes kept, halves given to the model)."""

    targets = [0, 1, 2, 0]

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, index):
        return torch.zeros(FEATURES), self.targets[index] * 0.5


class TargetsOfTwoShapes(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, index):
        return torch.zeros(FEATURES), torch.zeros(1 + index % 2)


class RowsWithTheirLabel(Dataset):
    """Each sample one array, its label a view of its last number (which keeps the whole
    row alive while the label is held); ``alive`` counts the rows not yet freed."""

    def __init__(self, count: int):
        self.count, self.alive, self.most_alive = count, 0, 0

    def __len__(self):
        return self.count

    def _freed(self):
        self.alive -= 1

    def __getitem__(self, index):
        import weakref

        row = np.full(FEATURES + 1, index % CLASSES, dtype=np.float32)
        self.alive += 1
        self.most_alive = max(self.most_alive, self.alive)
        weakref.finalize(row, self._freed)
        tensor = torch.from_numpy(row)
        return tensor[:-1], tensor[-1]


class Empty(Dataset):
    def __len__(self):
        return 0

    def __getitem__(self, index):
        raise IndexError(index)


class RowsPickledWhole(MappedRows):
    """A mapped file with no ``__getstate__`` of its own: pickled, its rows would go whole."""

    __getstate__ = object.__getstate__

    def __setstate__(self, state):
        self.__dict__.update(state)


class Lengthening(Dataset):
    """1-D samples growing from 1 to 9,001 numbers: the first tells nothing of the rest."""

    def __len__(self):
        return 10

    def __getitem__(self, index):
        return torch.zeros(1 + 1000 * index), index % 2


class DictAt(Dataset):
    """Pairs, but a dict at sample 5 (the first and last looked at before training are fine,
    and the targets are its own: the parent reads no other sample)."""

    targets = [index % CLASSES for index in range(10)]

    def __len__(self):
        return 10

    def __getitem__(self, index):
        pair = (torch.zeros(FEATURES), index % CLASSES)
        return dict(zip("xy", pair)) if index == 5 else pair


class TensorMappedWhole(Dataset):
    """Rows mapped with ``torch.from_file(shared=True)``, with no ``__getstate__``."""

    def __init__(self, path, count: int):
        self.rows = torch.from_file(str(path), shared=True, size=count * FEATURES,
                                    dtype=torch.float32).view(count, FEATURES)

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, index):
        return self.rows[index].clone(), index % CLASSES
