"""Which clients a round trains, and which worker trains which of them.

Two ways to sample: a fixed-size uniform sample (McMahan et al. 2017, what FedAvg always
did) and Poisson sampling, where each client joins a round independently with probability
``q`` (what the privacy accountants assume for DP-FedAvg, McMahan et al. 2018).
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

_SAMPLING, _CLIENT, _POISSON = 0x5EED_0001, 0x5EED_0002, 0x5EED_0003


def mix_seed(*parts: int) -> int:
    """A 63-bit seed from several integers (splitmix64 over the parts): neighbouring rounds
    and clients get unrelated streams."""
    state = 0x9E3779B97F4A7C15
    for part in parts:
        state = (state ^ (part & 0xFFFFFFFFFFFFFFFF)) * 0xBF58476D1CE4E5B9 & 0xFFFFFFFFFFFFFFFF
        state ^= state >> 31
    return state & 0x7FFFFFFFFFFFFFFF


#: Above this many clients a round's sample is drawn by Floyd's method, O(sampled), instead
#: of a permutation of every client (100,000 clients: 10 draws, not 100,000 per round).
PERMUTATION_CLIENTS = 1 << 16


def sample_clients(clients: int, per_round: int, seed: int, round_index: int) -> list[int]:
    """The ids of the ``per_round`` clients round ``round_index`` trains (uniform, without
    replacement), in increasing order."""
    generator = torch.Generator().manual_seed(mix_seed(seed, round_index, _SAMPLING))
    if clients > PERMUTATION_CLIENTS:
        return floyd_sample(clients, per_round, generator)
    return sorted(torch.randperm(clients, generator=generator)[:per_round].tolist())


def floyd_sample(clients: int, count: int, generator: torch.Generator) -> list[int]:
    """``count`` of ``range(clients)`` uniformly without replacement, in increasing order,
    in ``count`` draws (Floyd's algorithm: Bentley & Floyd 1987)."""
    chosen: set[int] = set()
    draws = torch.rand(count, generator=generator, dtype=torch.float64).tolist()
    for j, draw in zip(range(clients - count, clients), draws):
        pick = min(int(draw * (j + 1)), j)
        chosen.add(j if pick in chosen else pick)
    return sorted(chosen)


def poisson_sample(clients: int, rate: float, seed: int, round_index: int) -> list[int]:
    """Each client joins round ``round_index`` independently with probability ``rate``;
    the ids in increasing order (possibly none)."""
    generator = torch.Generator().manual_seed(mix_seed(seed, round_index, _POISSON))
    return torch.nonzero(torch.rand(clients, generator=generator, dtype=torch.float64)
                         < rate).flatten().tolist()


def poisson_capacity(clients: int, rate: float) -> int:
    """Rows enough for any Poisson round in practice: the mean plus 10 standard deviations
    plus 10 (a binomial count beyond it has probability below 1e-20), at most every
    client."""
    mean = clients * rate
    return min(clients, math.ceil(mean + 10 * math.sqrt(mean * (1 - rate)) + 10))


def client_seed(seed: int, round_index: int, client: int) -> int:
    """The seed of one client's local training in one round (batch order, dropout)."""
    return mix_seed(seed, round_index, client, _CLIENT)


def assign_clients(sampled: Sequence[int], sizes: Sequence[int],
                   world_size: int) -> list[list[int]]:
    """Spread the round's clients over the workers so that each trains about as many samples.

    Largest client first, each to the least-loaded worker (ties: lower rank); each worker's
    list is in increasing client id. Deterministic, and it only decides who does the work:
    the result of a round does not depend on it.
    """
    loads = [0] * world_size
    shares: list[list[int]] = [[] for _ in range(world_size)]
    for client in sorted(sampled, key=lambda c: (-sizes[c], c)):
        rank = min(range(world_size), key=lambda r: (loads[r], r))
        shares[rank].append(client)
        loads[rank] += sizes[client]
    return [sorted(share) for share in shares]
