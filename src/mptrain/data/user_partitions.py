"""Partitions of the user's: a function named on the command line (``module:function``)
or given from Python (``fit(partition=my_split)``), called with ``(targets, clients, seed)``
and what it returns checked, so a mistake in it is one line, not a crash rounds later."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ..errors import UserError, raised_by_users_code
from ..errors import setting_name as named   # as the caller spelled the setting
from ..imports import import_name


#: Partition functions given from Python (``fit(partition=my_split)``), by the name that
#: stands for them in the run's settings: the cut is made in the parent (and in every
#: torchrun rank, each of which called ``fit`` with the function), so the function itself
#: never travels to a worker, and a lambda or a notebook's function serves as well.
_GIVEN_FUNCTIONS: dict = {}


def given_function(function) -> str:
    """The name ``function`` goes by in the run's settings, summary and checkpoint
    (``module:qualified_name``, the import string it would have on the command line);
    :func:`user_partition` calls the function itself. A resume gives it again, as it gives
    an import string again.

    A function without a name of its own (a lambda, one defined in a function) is also
    named by where it is, ``@file:line``: two lambdas of a script both went by
    ``__main__:<lambda>``, so a resume given the other one took it for the same cut."""
    name = import_name(function)
    code = getattr(function, "__code__", None)
    if "<" in name and code is not None:
        name += f"@{Path(code.co_filename).name}:{code.co_firstlineno}"
    _GIVEN_FUNCTIONS[name] = function   # the latest call's function is the run's
    return name


def is_given_function(name) -> bool:
    """Whether ``name`` stands for a function given from Python in this process."""
    return isinstance(name, str) and name in _GIVEN_FUNCTIONS


def user_partition(function: str, targets: torch.Tensor, clients: int,
                   seed: int) -> list[torch.Tensor]:
    """Call ``function(targets, clients, seed)`` and check what it returns, so a mistake in
    it is one line naming the problem instead of a crash rounds into training."""
    from ..imports import load_object

    split = _GIVEN_FUNCTIONS.get(function) or load_object(function, named('partition'))
    where = f"partition function {function}"
    with raised_by_users_code(where):
        produced = split(targets, clients, seed)
    if isinstance(produced, (str, bytes)) or not hasattr(produced, "__len__"):
        raise UserError(f"{where} returned {type(produced).__name__}; it must return a list "
                        "of index lists, one per client")
    if len(produced) != clients:
        raise UserError(f"{where} returned {len(produced)} parts for {named('clients')} "
                        f"{clients}; it must return one index list per client")
    samples = len(targets)
    parts = [_user_part(part, client, samples, where) for client, part in enumerate(produced)]
    _refuse_overlap(parts, where)
    return [part.sort().values for part in parts]


def _user_part(part, client: int, samples: int, where: str) -> torch.Tensor:
    try:
        # A copy: numpy views with negative strides (a[::-1]) cannot become tensors.
        # A tensor part is copied by torch (numpy 2 warns of a tensor's __array__).
        values = part.detach().cpu().clone() if torch.is_tensor(part) \
            else torch.as_tensor(np.array(part))
    except (TypeError, ValueError, RuntimeError):
        raise UserError(f"{where} returned {type(part).__name__} for client {client}; each "
                        "part must be a sequence of sample indices") from None
    if values.numel() == 0:
        raise UserError(f"{where} left client {client} empty; every client needs at least "
                        "one sample")
    if values.dim() != 1 or values.dtype == torch.bool or values.dtype.is_floating_point \
            or values.dtype.is_complex:
        raise UserError(f"{where} returned {values.dtype} values of shape "
                        f"{tuple(values.shape)} for client {client}; each part must be a flat "
                        "sequence of integer sample indices")
    values = values.to(torch.int64)
    bad = values[(values < 0) | (values >= samples)]
    if len(bad):
        raise UserError(f"{where} returned index {int(bad[0])} for client {client}; indices "
                        f"must be in 0..{samples - 1} (the training set has {samples} samples)")
    return values


def _refuse_overlap(parts: list[torch.Tensor], where: str) -> None:
    indices = torch.cat(parts)
    owners = torch.repeat_interleave(torch.arange(len(parts)), torch.tensor([len(p) for p in
                                                                             parts]))
    order = torch.argsort(indices, stable=True)
    indices, owners = indices[order], owners[order]
    repeated = torch.nonzero(indices[1:] == indices[:-1]).flatten()
    if len(repeated):
        at = int(repeated[0])
        sample, first, second = int(indices[at]), int(owners[at]), int(owners[at + 1])
        place = f"twice in client {first}" if first == second \
            else f"in clients {first} and {second}"
        raise UserError(f"{where} returned overlapping indices: sample {sample} is {place}")
