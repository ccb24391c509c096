"""The user's data, built under ``--seed``: a data factory (``--data module:make``) and the
``__getitem__`` calls that stack a data set are run with torch's, numpy's and Python's
global generators seeded, so the same seed gives the same data -- on a resume too, which
must train on the data the checkpoint was trained on.

The seed is derived from ``--seed`` rather than equal to it: the model factory is called
under ``torch.manual_seed(seed)``, and the model's first weights would otherwise be drawn
from the very random numbers that made the data. The caller's generators are given back
as they were: ``fit()`` runs in the user's process, whose own random numbers it must not
move.
"""

from __future__ import annotations

import random
from contextlib import contextmanager
from typing import Iterator

import numpy as np
import torch

#: Mixed with --seed into the data's seed: any constant apart from the model's stream.
_DATA_STREAM = 0x64617461   # "data"


def data_seed(seed: int) -> int:
    """The seed the user's data is built under for run seed ``seed`` (32 bits: numpy's
    global generator takes no more)."""
    return int(np.random.SeedSequence([seed, _DATA_STREAM]).generate_state(1)[0])


@contextmanager
def generators_kept() -> Iterator[None]:
    """Within the block the global generators (torch's CPU one, numpy's, ``random``'s) may
    draw; after it, each is where it was."""
    torch_state, numpy_state, python_state = \
        torch.get_rng_state(), np.random.get_state(), random.getstate()
    try:
        yield
    finally:
        torch.set_rng_state(torch_state)
        np.random.set_state(numpy_state)
        random.setstate(python_state)


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Within the block torch's (CPU), numpy's and ``random``'s global generators start
    from ``data_seed(seed)``; after it, each is where it was."""
    with generators_kept():
        value = data_seed(seed)
        torch.default_generator.manual_seed(value)  # the CPU's only: data is built on the CPU
        np.random.seed(value)
        random.seed(value)
        yield
