"""FedAvg's arithmetic as plain functions, tested without processes (the way Flower keeps
``aggregate.py`` apart from its strategies): which clients a round samples, which worker
trains which client, the server update (FedAvg, FedAvgM) and FedProx's proximal term.

Everything random is a function of ``(seed, round, client)``, never of the worker that runs
it, so the same seed gives the same run whatever the number of workers.
"""

from __future__ import annotations

from typing import Sequence

import torch

from ..comm.reduce import weighted_average

_SAMPLING, _CLIENT = 0x5EED_0001, 0x5EED_0002


def mix_seed(*parts: int) -> int:
    """A 63-bit seed from several integers (splitmix64 over the parts): neighbouring rounds
    and clients get unrelated streams."""
    state = 0x9E3779B97F4A7C15
    for part in parts:
        state = (state ^ (part & 0xFFFFFFFFFFFFFFFF)) * 0xBF58476D1CE4E5B9 & 0xFFFFFFFFFFFFFFFF
        state ^= state >> 31
    return state & 0x7FFFFFFFFFFFFFFF


def sample_clients(clients: int, per_round: int, seed: int, round_index: int) -> list[int]:
    """The ids of the clients round ``round_index`` trains, in increasing order."""
    generator = torch.Generator().manual_seed(mix_seed(seed, round_index, _SAMPLING))
    return sorted(torch.randperm(clients, generator=generator)[:per_round].tolist())


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


def column_slice(numel: int, world_size: int, rank: int) -> slice:
    """The part of the flat parameter vector rank ``rank`` aggregates (a reduce-scatter)."""
    per_rank = -(-numel // world_size)
    return slice(min(numel, rank * per_rank), min(numel, (rank + 1) * per_rank))


def aggregate_rows(rows: torch.Tensor, weights: Sequence[float]) -> torch.Tensor:
    """Weighted mean of the clients' rows, summed in row (client-id) order; rows with
    weight 0 (failed clients) are left out."""
    kept = [(row, w) for row, w in zip(rows, weights) if w > 0]
    return weighted_average([row for row, _ in kept], [w for _, w in kept])


@torch.no_grad()
def server_update_(global_params: torch.Tensor, client_average: torch.Tensor,
                   velocity: torch.Tensor | None, server_lr: float,
                   server_momentum: float) -> None:
    """Move the global model towards the clients' average.

    The pseudo-gradient is ``global - average``; plain FedAvg (lr 1, no momentum) takes the
    average itself, FedAvgM (Hsu et al. 2019) keeps a momentum buffer ``velocity`` and steps
    ``server_lr * velocity``.
    """
    if server_lr == 1.0 and not server_momentum:
        global_params.copy_(client_average)
        return
    step = global_params - client_average
    if server_momentum:
        velocity.mul_(server_momentum).add_(step)
        step = velocity
    global_params.sub_(step, alpha=server_lr)


@torch.no_grad()
def add_proximal_gradient_(params: Sequence[torch.Tensor],
                           global_params: Sequence[torch.Tensor], mu: float,
                           scratch: Sequence[torch.Tensor] | None = None) -> None:
    """FedProx (Li et al. 2020): the gradient of ``mu/2 * ||w - w_global||^2`` added to each
    parameter's gradient, pulling a client's model towards the round's global model.

    ``scratch`` (a tensor shaped like each parameter) holds ``w - w_global`` so that a step
    allocates nothing; the arithmetic, and so every bit of the result, is the same.
    """
    buffers = scratch if scratch is not None else [None] * len(params)
    for param, anchor, buffer in zip(params, global_params, buffers):
        if param.grad is not None:
            param.grad.add_(torch.sub(param, anchor, out=buffer), alpha=mu)
