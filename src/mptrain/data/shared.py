"""Tensors in shared memory, made once in the parent: a data set held as two tensors, and
zeros made in shared memory directly (``shared_zeros``: fedavg's tables, the sharded
optimizer's state).

Workers index into the same pages (fork inherits the mapping, spawn receives a file
descriptor), so N workers cost one copy of the data, and batches are gathered with one
``index_select`` instead of N Python ``__getitem__`` calls and a collate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import Dataset, TensorDataset

from ..errors import UserError, brief
from .samples import (as_targets, dense, floats32, read_user, stacked_targets,
                      user_sample)


class RowSource:
    """The rows of a big input tensor, computed where the tensor will live.

    A data set converted in private memory and then moved into shared memory is held twice
    by the parent for a moment (MNIST as float32: 2 x 180 MiB). Built from a ``RowSource``,
    the rows are written once, straight into the buffer the workers will read.

    ``fill(out, start)`` writes rows ``start : start + len(out)`` into ``out``; it may be
    called for any range, in any order, so it must not depend on earlier calls.
    """

    def __init__(self, shape: tuple, dtype: torch.dtype, fill, rows_per_chunk: int = 10_000):
        self.shape, self.dtype = tuple(shape), dtype
        self._fill, self._rows_per_chunk = fill, rows_per_chunk

    def __len__(self):
        return self.shape[0]

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * torch.empty((), dtype=self.dtype).element_size()

    def rows(self, start: int, end: int) -> torch.Tensor:
        out = torch.empty((end - start, *self.shape[1:]), dtype=self.dtype)
        self._fill(out, start)
        return out

    def materialize(self, shared: bool) -> torch.Tensor:
        out = torch.empty(self.shape, dtype=self.dtype)
        if shared:
            out.share_memory_()  # its pages were never touched: nothing is copied
        return self.fill_into(out)

    def fill_into(self, out: torch.Tensor) -> torch.Tensor:
        """Write every row into ``out`` (of this source's shape and dtype), chunk by chunk."""
        for start in range(0, len(self), self._rows_per_chunk):
            self._fill(out[start:start + self._rows_per_chunk], start)
        return out


@dataclass(frozen=True)
class PixelDecode:
    """Stored pixels (uint8) to the float32 inputs a model takes: ``x * scale - shift``,
    in place on the converted batch -- the very operations, in the very order, that
    converting the whole set up front used, so that a batch decoded in a worker has the bits
    the float32 set would have had (``--data-dtype``)."""

    scale: float
    shift: float

    def __call__(self, raw: torch.Tensor) -> torch.Tensor:
        return raw.to(torch.float32).mul_(self.scale).sub_(self.shift)

    def rows(self, raw: torch.Tensor) -> RowSource:
        """The decoded rows of ``raw``, computed chunk by chunk where they are written."""
        def fill(out, start):
            out.copy_(raw[start:start + len(out)])
            out.mul_(self.scale).sub_(self.shift)

        return RowSource(tuple(raw.shape), torch.float32, fill)


class SharedTensorDataset(Dataset):
    """Inputs and targets as two tensors; ``batch(indices)`` is the fast path for training.

    ``inputs`` may be given as a :class:`RowSource`: it is then built by ``share_memory_()``
    directly in shared memory, or in private memory on first use. With ``decode`` (a
    :class:`PixelDecode`) ``inputs`` holds uint8 pixels, a quarter of float32's memory,
    and every batch (``batch``, ``head``, a sample) is decoded to float32 as it is read.
    """

    def __init__(self, inputs, targets: torch.Tensor, decode: PixelDecode | None = None):
        if len(inputs) != len(targets):
            raise UserError(f"data set has {len(inputs)} inputs but {len(targets)} targets")
        self._inputs = inputs
        self.targets = targets
        self.decode = decode
        #: A sample the user's ``__getitem__`` gave otherwise when read again while it was
        #: stacked (random augmentation, frozen by stacking: ``launch.preflight`` warns).
        self.varied_sample: int | None = None

    @property
    def inputs(self) -> torch.Tensor:
        if isinstance(self._inputs, RowSource):
            self._inputs = self._inputs.materialize(shared=False)
        return self._inputs

    @property
    def held_inputs(self):
        """The inputs as held: a tensor, or a ``RowSource`` not built yet (read row by row
        without building it: ``data.fingerprint``); stored pixels as the rows they decode
        to, so that a set has one fingerprint however it is stored."""
        if self.decode is not None:
            return self.decode.rows(self.inputs)
        return self._inputs

    @property
    def built(self) -> bool:
        """Whether the inputs are tensors already (a ``RowSource`` is built on first use)."""
        return not isinstance(self._inputs, RowSource)

    @property
    def input_shape(self) -> tuple:
        return tuple(self._inputs.shape[1:])

    def head(self, count: int) -> torch.Tensor:
        """The first ``count`` inputs, without building the rest."""
        if isinstance(self._inputs, RowSource):
            return self._inputs.rows(0, min(count, len(self)))
        return self.decoded(self._inputs[:count])

    def __len__(self):
        return len(self._inputs)

    def __getitem__(self, index):
        return self.decoded(self.inputs[index]), self.targets[index]

    def batch(self, indices: torch.Tensor):
        inputs, targets = self.stored_batch(indices)
        return self.decoded(inputs), targets

    def stored_batch(self, indices: torch.Tensor):
        """A batch as stored (pixels not decoded yet: a quarter of the bytes to move to a
        GPU, decoded there with :meth:`decoded`)."""
        return self.inputs.index_select(0, indices), self.targets.index_select(0, indices)

    def decoded(self, inputs: torch.Tensor) -> torch.Tensor:
        """``inputs`` as read from this set, as the model takes them."""
        return inputs if self.decode is None else self.decode(inputs)

    @property
    def nbytes(self) -> int:
        return self._inputs_nbytes() + self.targets.numel() * self.targets.element_size()

    @property
    def is_shared(self) -> bool:
        return self.inputs.is_shared() and self.targets.is_shared()

    def materialize_(self) -> "SharedTensorDataset":
        self.inputs  # noqa: B018  (builds a RowSource in private memory)
        return self

    def place_in_(self, allocate, write: bool) -> "SharedTensorDataset":
        """Move inputs and targets into buffers from ``allocate(nbytes)`` (a shared uint8
        tensor). ``write``: this process fills them; otherwise another process sharing them
        did, and this one only drops its own copy (torchrun's ranks of one node: the data
        set once per node)."""
        inputs = self._inputs
        placed = _typed(allocate(self._inputs_nbytes()), inputs.dtype, inputs.shape)
        if write:
            if isinstance(inputs, RowSource):
                inputs.fill_into(placed)
            else:
                placed.copy_(inputs)
        targets = _typed(allocate(self.targets.numel() * self.targets.element_size()),
                         self.targets.dtype, self.targets.shape)
        if write:
            targets.copy_(self.targets)
        self._inputs, self.targets = placed, targets
        return self

    def _inputs_nbytes(self) -> int:
        inputs = self._inputs
        return inputs.nbytes if isinstance(inputs, RowSource) else \
            inputs.numel() * inputs.element_size()

    def share_memory_(self) -> "SharedTensorDataset":
        if isinstance(self._inputs, RowSource):
            self._inputs = self._inputs.materialize(shared=True)
        else:
            self._inputs.share_memory_()
        self.targets.share_memory_()
        return self


def _typed(buffer: torch.Tensor, dtype: torch.dtype, shape) -> torch.Tensor:
    """``buffer`` (uint8) seen as a tensor of ``dtype`` and ``shape``."""
    return buffer.view(dtype).view(tuple(shape))


def materialize(dataset, what: str) -> SharedTensorDataset:
    """Turn any map-style data set of ``(input, target)`` pairs into two stacked tensors.

    ``what`` ("training data", "test data") names the data set in error messages.
    """
    if isinstance(dataset, SharedTensorDataset):
        return _non_empty(dataset, what)
    if isinstance(dataset, TensorDataset) and len(dataset.tensors) == 2:
        inputs, targets = dataset.tensors
        return _non_empty(SharedTensorDataset(floats32(dense(inputs, what)),
                                              as_targets(dense(targets, what))), what)
    if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
        raise UserError(f"{what} is a {type(dataset).__name__}, not a map-style Dataset "
                        "(it needs __len__ and __getitem__)")
    size = read_user(len, dataset, f"len({what})")
    if size == 0:
        raise UserError(f"{what} is empty")
    samples = [user_sample(dataset, index, what) for index in range(size)]
    varied = _first_varied(dataset, samples, what)
    targets = stacked_targets([targets for _, targets in samples], what)
    try:
        stacked_inputs = torch.stack([inputs for inputs, _ in samples])
    except RuntimeError as err:
        if all(inputs.dim() == 1 for inputs, _ in samples):   # token sequences: collated
            from .ragged import ragged_from

            ragged = ragged_from([inputs for inputs, _ in samples], as_targets(targets),
                                 what)
            ragged.varied_sample = varied
            return ragged
        raise UserError(f"{what}: samples cannot be stacked into one tensor ({brief(str(err))}); "
                        "all inputs must have the same shape (1-D sequences of different "
                        "lengths are collated: --collate pad)") from None
    stacked = SharedTensorDataset(floats32(stacked_inputs), as_targets(targets))
    stacked.varied_sample = varied
    return stacked


def _first_varied(dataset, samples: list, what: str) -> int | None:
    """The first of two samples (the first and the last) that ``dataset`` gives otherwise
    when read a second time, or None.

    A ``__getitem__`` that augments at random gives each read other values, but the data is
    read once and stacked: every epoch then sees the same draws, and the user, who meant
    fresh ones, is not told. Two more reads find it (the global generators have moved on
    since the first; in one stacking, under one seed, so a seeded build still tells)."""
    for index in sorted({0, len(samples) - 1}):
        again = user_sample(dataset, index, what)
        if not all(_same_bits(a, b) for a, b in zip(samples[index], again)):
            return index
    return None


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal shape, dtype and bytes (NaN included: a missing value read twice is the same)."""
    return a.shape == b.shape and a.dtype == b.dtype and \
        torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


def first_non_finite(tensor: torch.Tensor, rows: int = 10_000) -> int | None:
    """The index of the first sample of ``tensor`` holding a NaN or an infinity, or None."""
    if not tensor.is_floating_point() or tensor.numel() == 0:
        return None
    for start in range(0, len(tensor), rows):   # in chunks: no bool copy of a large set
        finite = torch.isfinite(tensor[start:start + rows]).reshape(
            min(rows, len(tensor) - start), -1).all(dim=1)
        if not finite.all():
            return start + int((~finite).nonzero()[0])
    return None


def _non_empty(dataset: SharedTensorDataset, what: str) -> SharedTensorDataset:
    if len(dataset) == 0:
        raise UserError(f"{what} is empty")
    return dataset


def shared_zeros(shape, dtype=torch.float32) -> torch.Tensor:
    """A tensor of zeros made in shared memory directly.

    ``torch.zeros(...).share_memory_()`` writes every page of a private copy, then copies it
    into a new segment: twice the bytes at the peak (10,000 SCAFFOLD clients of the 2NN:
    15.6 GiB instead of 7.4). A new segment is zeros already (``ftruncate``) and its pages
    take memory only once written, so a table most of whose rows are never touched costs
    only the rows written. torch makes such a segment with ``UntypedStorage._new_shared``
    (what ``share_memory_`` itself calls); without it, the copy is made as before.
    """
    new_shared = getattr(torch.UntypedStorage, "_new_shared", None)
    if new_shared is None:
        return torch.zeros(shape, dtype=dtype).share_memory_()
    numel = math.prod(shape)
    storage = new_shared(numel * torch.empty(0, dtype=dtype).element_size())
    return torch.empty(0, dtype=dtype).set_(storage, 0, tuple(shape))
