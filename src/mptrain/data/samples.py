"""The user's samples as mptrain reads them: ``dataset[index]`` checked to be an (input,
target) pair of dense CPU tensors, numbers or arrays, with what the user's code raises
turned into one line naming the sample.

Both ways of holding a data set read samples through here -- stacking it once in the parent
(``data.shared.materialize``) and reading it where it lies (``data.stream``) -- so a sample
is refused in the same words, and becomes the same tensors, whichever loader reads it.
"""

from __future__ import annotations

import numbers

import numpy as np
import torch

from ..errors import UserError, brief, raised_by_users_code


def read_user(call, argument, what: str):
    """``call(argument)`` on the user's data set: what it raises is one line naming the
    sample (mptrain reads samples in the parent before training starts)."""
    with raised_by_users_code(f"reading {what}",
                              "the data set must give every sample from 0 to len - 1"):
        return call(argument)


def user_sample(dataset, index: int, what: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``dataset[index]`` as an (input, target) pair of tensors."""
    return as_pair(read_user(dataset.__getitem__, index, f"{what}[{index}]"), what, index)


def as_pair(item, what: str, index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """What ``dataset[index]`` gave (``item``) as an (input, target) pair of tensors."""
    if not (isinstance(item, (tuple, list)) and len(item) == 2):
        raise UserError(f"{what}[{index}] is a {type(item).__name__}; each sample must be "
                        "an (input, target) pair")
    return as_tensor(item[0], what, index), as_tensor(item[1], what, index)


def floats32(tensor: torch.Tensor) -> torch.Tensor:
    """float64 (numpy's default) becomes float32, the dtype models are built with."""
    return tensor.float() if tensor.dtype == torch.float64 else tensor


def as_targets(tensor: torch.Tensor) -> torch.Tensor:
    """Stacked targets as the loss takes them: float64 as float32, booleans (a mask as
    labels) as the classes 0 and 1."""
    tensor = floats32(tensor)
    return tensor.long() if tensor.dtype == torch.bool else tensor


def stacked_targets(targets: list, what: str, join=torch.stack) -> torch.Tensor:
    """``targets`` joined into one tensor (``join``: ``torch.stack`` for samples' targets,
    ``torch.cat`` for stacked chunks of them), in one line if their shapes differ."""
    try:
        return join(targets)
    except RuntimeError as err:
        raise UserError(f"{what}: targets cannot be stacked into one tensor "
                        f"({brief(str(err))}); all targets must have the same shape") from None


def as_tensor(value, what, index) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return dense(value, f"{what}[{index}]")
    if isinstance(value, bool):
        return torch.tensor(int(value))
    if isinstance(value, numbers.Integral):
        return torch.tensor(int(value), dtype=torch.int64)
    if isinstance(value, numbers.Real):
        return torch.tensor(float(value), dtype=torch.float32)
    if isinstance(value, (str, bytes)) or (isinstance(value, np.ndarray)
                                          and value.dtype.kind in "USO"):
        # Labels as class names ("cat"): the loss takes class indices.
        raise UserError(f"{what}[{index}] holds a {type(value).__name__} ({value!r:.40}); "
                        "samples must be tensors, numpy arrays or numbers: map class names "
                        "to integers (e.g. {name: i for i, name in "
                        "enumerate(sorted(set(names)))})")
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(value))
    raise UserError(f"{what}[{index}] holds a {type(value).__name__}; samples must be "
                    "tensors, numpy arrays or numbers")


def dense(tensor: torch.Tensor, what: str) -> torch.Tensor:
    if tensor.layout != torch.strided:
        raise UserError(f"{what} holds a {tensor.layout} tensor; shared memory takes dense "
                        "tensors only: call .to_dense() in your data factory")
    if tensor.device.type != "cpu":
        raise UserError(f"{what} lives on {tensor.device}; give mptrain CPU tensors, it moves "
                        "batches to the training device itself")
    return tensor.contiguous()
