"""Unreliable clients, seeded per (seed, round, client) so that a run is reproducible
whatever the number of workers.

- A **dropout** is a sampled client that trains but never reports (a phone that went
  offline): the round aggregates the clients that did report, weighted as always.
- A **straggler** does only part of its local work (the FedProx paper's systems
  heterogeneity). ``--straggler-mode per-client`` (the default): each sampled client
  straggles with probability P and does a uniformly random number of local steps from 1 to
  ``full - 1``. ``exact``, as FedProx's code (litian96/FedProx, ``trainers/fedprox.py``)
  runs its table: of the K clients a round samples, ``round(K x (1 - P))`` chosen at random
  finish and the others straggle -- at 90% of 10, exactly 9 -- each doing a uniformly random
  whole number of local epochs from 1 to E - 1.

Both are the same whichever process trains a client: a draw depends on the seed, the round,
the client and (``exact``) the round's sample, never on which worker asks.

:meth:`AvailabilityConfig.client_turn` is where a client's round is decided -- the steps it
may take and whether its update reaches the server -- for every path that asks: the trainer
of one client at a time, a stacked cohort, the virtual clock, the worker's tally.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from .choices import STRAGGLER_MODES
from .sampling import mix_seed

_DROPOUT, _STRAGGLER = 0x5EED_0004, 0x5EED_0005
_EXACT_STRAGGLERS, _STRAGGLER_EPOCHS = 0x5EED_000A, 0x5EED_000B
PER_CLIENT, EXACT = STRAGGLER_MODES


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


def exact_stragglers(seed: int, round_index: int, sampled: Sequence[int],
                     rate: float) -> frozenset[int]:
    """FedProx's stragglers of a round: of the K clients ``sampled``, all but
    ``round(K x (1 - rate))`` (its code's count of clients that finish; Python's rounding,
    as there), chosen uniformly from the seed and the round."""
    clients = sorted(sampled)
    finishing = round(len(clients) * (1 - rate))
    if rate <= 0 or finishing >= len(clients):
        return frozenset()
    generator = torch.Generator().manual_seed(
        mix_seed(seed, round_index, len(clients), _EXACT_STRAGGLERS))
    order = torch.randperm(len(clients), generator=generator).tolist()
    return frozenset(clients[i] for i in order[finishing:])


def straggler_epochs(seed: int, round_index: int, client: int, local_epochs: int) -> int:
    """The whole local epochs a straggler of ``exact`` mode does: uniform from 1 to
    ``local_epochs - 1`` (FedProx's ``randint(1, E)``); 1 where E is 1 or 2."""
    draw = _uniform(seed, round_index, client, _STRAGGLER_EPOCHS)
    return 1 + min(max(0, local_epochs - 2), int(draw * max(1, local_epochs - 1)))


def step_budget(seed: int, round_index: int, client: int, full: int, rate: float,
                mode: str = PER_CLIENT, local_epochs: int = 1,
                sampled: Sequence[int] = ()) -> int:
    """The local steps ``client`` may take in round ``round_index`` out of its ``full``
    (``local_epochs`` epochs of equal steps): ``per-client``, :func:`local_steps`;
    ``exact``, ``full`` unless it is one of the round's :func:`exact_stragglers` among
    ``sampled``, then :func:`straggler_epochs` whole epochs of them. What the one-at-a-time
    and the stacked paths both ask."""
    if mode == PER_CLIENT:
        return local_steps(seed, round_index, client, rate, full)
    if client not in exact_stragglers(seed, round_index, sampled, rate):
        return full
    return straggler_epochs(seed, round_index, client, local_epochs) * (full // local_epochs)


@dataclass(frozen=True)
class ClientTurn:
    """What unreliability makes of one client's round: ``budget`` of its ``full`` local
    steps, whether it drops out (``dropped_out``: it trains, then never reports) and whether
    it is a straggler whose partial work the server will not wait for
    (``straggler_dropped``: ``--drop-stragglers``; known before it trains, so a trainer
    whose client keeps nothing of its round may skip it)."""

    full: int
    budget: int
    dropped_out: bool
    straggler_dropped: bool

    @property
    def straggles(self) -> bool:
        """Whether the client does only part of its local work."""
        return self.budget < self.full

    @property
    def reports(self) -> bool:
        """Whether the server hears the client's update."""
        return not (self.dropped_out or self.straggler_dropped)


@dataclass(frozen=True)
class AvailabilityConfig:
    """The run's settings that make clients unreliable (``--dropout-rate``,
    ``--straggler-rate``, ``--straggler-mode``, ``--drop-stragglers``); the default: every
    client does all its work and reports."""

    seed: int = 0
    dropout_rate: float = 0.0
    straggler_rate: float = 0.0
    straggler_mode: str = PER_CLIENT
    drop_stragglers: bool = False
    local_epochs: int = 1

    @classmethod
    def of(cls, config) -> "AvailabilityConfig":
        """A run's (its seed and its ``fedavg`` settings)."""
        f = config.fedavg
        return cls(config.seed, f.dropout_rate, f.straggler_rate, f.straggler_mode,
                   f.drop_stragglers, f.local_epochs)

    def client_turn(self, round_index: int, client: int, full: int,
                    sampled: Sequence[int] = ()) -> ClientTurn:
        """``client``'s round ``round_index`` out of its ``full`` local steps: its
        :func:`step_budget` (``sampled``: the round's clients, where they decide who
        straggles) and whether it reports (:func:`drops_out`, ``drop_stragglers``)."""
        budget = step_budget(self.seed, round_index, client, full, self.straggler_rate,
                             self.straggler_mode, self.local_epochs, sampled)
        return ClientTurn(full, budget,
                          drops_out(self.seed, round_index, client, self.dropout_rate),
                          self.drop_stragglers and budget < full)
