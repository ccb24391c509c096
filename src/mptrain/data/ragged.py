"""Samples of different lengths (``--collate pad`` or ``--collate pkg.mod:fn``): 1-D token
sequences held in shared memory as one flat tensor of every sample's values end to end and
the offsets where each starts (no Python object per sample: N workers still map one copy),
and collated a batch at a time, in the worker that reads it.

The built-in ``pad`` pads each batch to its longest sequence with 0 and gives the model the
pair ``(tokens [B, L], mask [B, L])`` as its one input, ``mask`` True on real tokens (the
``attention_mask`` of Hugging Face's models, as booleans); it is gathered with a handful of
tensor operations whatever the batch size. A function of the user's is called
``fn(sequences, targets)`` with the batch's sequences (a list of 1-D tensors) and stacked
targets, and returns ``(inputs, targets)``; what ``inputs`` is (a tensor, a tuple of them) is
between it and the model.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch.utils.data import Dataset

from ..errors import UserError, setting_name
from ..imports import import_name

PAD = "pad"

#: Collate functions given from Python (``fit(collate=fn)``), by the name standing for them
#: in the run's settings (as ``data.batch_transform`` keeps given transforms).
_GIVEN: dict[str, Callable] = {}


def given_collate(function: Callable) -> str:
    name = import_name(function)
    _GIVEN[name] = function
    return name


def check_collate_name(value) -> None:
    """``--collate``'s value on its own: ``pad`` or an import string."""
    from ..imports import can_name_code, colon_hint

    said = setting_name("collate")
    if not isinstance(value, str) or not (value == PAD or value in _GIVEN
                                          or can_name_code(value)):
        hint = colon_hint(value) if isinstance(value, str) else ""
        raise UserError(f"{said} must be 'pad' or an import string such as "
                        f"'my_pkg.text:collate'{hint}, got {value!r}")


def resolve_collate(name: str) -> Callable:
    from ..imports import load_object

    if name == PAD:
        return pad_to_longest
    return _GIVEN.get(name) or load_object(name, setting_name("collate"))


def pad_to_longest(values: torch.Tensor, starts: torch.Tensor, lengths: torch.Tensor):
    """The batch's sequences (``values[starts[i] : starts[i] + lengths[i]]``) padded with 0
    to the longest: ``(tokens, mask)``."""
    longest = int(lengths.max()) if len(lengths) else 0
    steps = torch.arange(longest)
    mask = steps.view(1, -1) < lengths.view(-1, 1)
    positions = (starts.view(-1, 1) + steps.view(1, -1)).clamp_(max=max(len(values) - 1, 0))
    tokens = values[positions] * mask.to(values.dtype) if len(values) else \
        torch.zeros(mask.shape, dtype=values.dtype)
    return tokens, mask


class RaggedDataset(Dataset):
    """1-D samples of different lengths: ``values`` end to end, ``offsets`` (N + 1) where
    each starts, targets stacked; ``batch(indices)`` collates (see the module doc).

    It answers what a :class:`~mptrain.data.shared.SharedTensorDataset` answers, so the
    feeds and the launcher's placing in shared memory take it as they are (the fingerprint
    hashes its values and offsets together: ``data.fingerprint``).
    """

    decode = None
    built = True
    varied_sample = None

    def __init__(self, values: torch.Tensor, offsets: torch.Tensor, targets: torch.Tensor,
                 collate: str = PAD):
        self.values, self.offsets, self.targets = values, offsets, targets
        self.collate = collate
        self._function = None

    @property
    def inputs(self) -> torch.Tensor:
        return self.values

    @property
    def input_shape(self) -> tuple:
        return (int((self.offsets[1:] - self.offsets[:-1]).max()),)   # the longest

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, index):
        return self.values[self.offsets[index]:self.offsets[index + 1]], self.targets[index]

    def __getstate__(self):
        # A function of the user's is found again by its name (a spawned worker imports it).
        return {**self.__dict__, "_function": None}

    def batch(self, indices: torch.Tensor):
        starts = self.offsets.index_select(0, indices)
        lengths = self.offsets.index_select(0, indices + 1) - starts
        targets = self.targets.index_select(0, indices)
        if self.collate == PAD:
            return pad_to_longest(self.values, starts, lengths), targets
        if self._function is None:
            self._function = resolve_collate(self.collate)
        sequences = [self.values[s:s + n] for s, n in zip(starts.tolist(), lengths.tolist())]
        return self._function(sequences, targets)

    stored_batch = batch

    def decoded(self, inputs):
        return inputs

    def head(self, count: int):
        return self.batch(torch.arange(min(count, len(self))))[0]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.values, self.offsets,
                                                          self.targets))

    @property
    def is_shared(self) -> bool:
        return all(t.is_shared() for t in (self.values, self.offsets, self.targets))

    def materialize_(self) -> "RaggedDataset":
        return self

    def share_memory_(self) -> "RaggedDataset":
        for tensor in (self.values, self.offsets, self.targets):
            tensor.share_memory_()
        return self

    def place_in_(self, allocate, write: bool) -> "RaggedDataset":
        """As :meth:`SharedTensorDataset.place_in_`: each tensor into a buffer of
        ``allocate``."""
        placed = []
        for tensor in (self.values, self.offsets, self.targets):
            buffer = allocate(tensor.numel() * tensor.element_size()) \
                .view(tensor.dtype).view(tensor.shape)
            if write:
                buffer.copy_(tensor)
            placed.append(buffer)
        self.values, self.offsets, self.targets = placed
        return self


def ragged_from(sequences: list[torch.Tensor], targets: torch.Tensor,
                what: str) -> RaggedDataset:
    """The samples' inputs (1-D tensors of one dtype) end to end, with their offsets."""
    if any(s.dim() != 1 for s in sequences):
        shape = next(list(s.shape) for s in sequences if s.dim() != 1)
        raise UserError(f"{what}: {setting_name('collate')} takes 1-D samples (token "
                        f"sequences); a sample has shape {shape}")
    lengths = torch.tensor([len(s) for s in sequences], dtype=torch.int64)
    offsets = torch.zeros(len(sequences) + 1, dtype=torch.int64)
    torch.cumsum(lengths, 0, out=offsets[1:])
    return RaggedDataset(torch.cat(sequences), offsets, targets)


def check_collated(bundle) -> None:
    """Refuse, before any process starts, a collate function that on the first batch does
    not return ``(inputs, targets)``: inputs a tensor or a tuple of tensors, targets a
    tensor, both of the batch's size."""
    data = bundle.train
    if not isinstance(data, RaggedDataset) or data.collate == PAD:
        return
    count = min(2, len(data))
    said = f"{setting_name('collate')} {data.collate}"
    from ..errors import raised_by_users_code

    with raised_by_users_code(said):
        produced = data.batch(torch.arange(count))
    parts = produced[0] if isinstance(produced, (tuple, list)) and len(produced) == 2 \
        else None
    inputs = list(parts) if isinstance(parts, (tuple, list)) else [parts]
    if parts is None or not all(isinstance(t, torch.Tensor) for t in inputs + [produced[1]]):
        raise UserError(f"{said} returned {type(produced).__name__} on the first batch; it "
                        "must return (inputs, targets): inputs a tensor or a tuple of "
                        "tensors, targets a tensor")
    sizes = {len(t) if t.dim() else None for t in inputs + [produced[1]]}
    if sizes != {count}:
        raise UserError(f"{said} gave {sorted(map(str, sizes))} rows for a batch of {count} "
                        "samples; every tensor it returns must have one row per sample")
