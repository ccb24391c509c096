"""Unreliable clients, seeded per (seed, round, client) so that a run is reproducible
whatever the number of workers.

- A **dropout** is a sampled client that trains but never reports (a phone that went
  offline): the round aggregates the clients that did report, weighted as always.
- A **straggler** does only part of its local work (the FedProx paper's systems
  heterogeneity): a uniformly random number of local steps from 1 to ``full - 1``.
"""

from __future__ import annotations

import torch

from .sampling import mix_seed

_DROPOUT, _STRAGGLER = 0x5EED_0004, 0x5EED_0005


def _uniform(seed: int, round_index: int, client: int, salt: int) -> float:
    generator = torch.Generator().manual_seed(mix_seed(seed, round_index, client, salt))
    return torch.rand((), generator=generator, dtype=torch.float64).item()


def drops_out(seed: int, round_index: int, client: int, rate: float) -> bool:
    """Whether ``client`` trains but never reports in round ``round_index``."""
    return rate > 0 and _uniform(seed, round_index, client, _DROPOUT) < rate


def local_steps(seed: int, round_index: int, client: int, rate: float, full: int) -> int:
    """The local steps ``client`` takes in round ``round_index``: ``full``, or for a
    straggler (probability ``rate``) a uniform count from 1 to ``full - 1``. A client with
    a single step to take cannot do less."""
    if rate <= 0 or full < 2:
        return full
    draw = _uniform(seed, round_index, client, _STRAGGLER)
    if draw >= rate:
        return full
    # The same draw, rescaled to [0, 1), picks the count: one stream per client and round.
    return 1 + min(full - 2, int(draw / rate * (full - 1)))
