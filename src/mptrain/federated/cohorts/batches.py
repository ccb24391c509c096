"""Which sample each client of a cohort reads at each stacked step.

A cohort trains its clients in lock step: step ``t`` runs every client's ``t``-th batch at
once. Each client keeps exactly the batches the one-at-a-time path gives it -- per local
epoch a permutation of its samples from its own seeded generator, cut in batches of ``B``,
the whole cut short at its step budget (a straggler) -- so the two paths see the same
samples in the same order. What does not fit a ``[steps, clients, B]`` block is padding:
the last, shorter batch of an epoch and every step after a client's last are filled with
one of the client's own samples at weight 0, which changes neither its loss nor its
gradient (its update is also masked out on steps after its last).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch


def client_batches(indices: torch.Tensor, generator: torch.Generator, batch_size: int,
                   local_epochs: int, budget: int) -> list[torch.Tensor]:
    """One client's batches in the order it trains them: what ``fedavg``'s one-at-a-time
    loop reads (a permutation per epoch from ``generator``, cut in ``batch_size``), at most
    ``budget`` of them. Every epoch draws its permutation, as that loop does."""
    batches: list[torch.Tensor] = []
    for _ in range(local_epochs):
        order = indices[torch.randperm(len(indices), generator=generator)]
        for batch in torch.split(order, batch_size):
            if len(batches) < budget:
                batches.append(batch)
    return batches


@dataclass
class CohortBatches:
    """``index[t, k]``: the samples client ``k`` reads at step ``t`` (padded to ``B``);
    ``weight[t, k]``: 1 for a real sample, 0 for padding; ``steps[k]``: the client's real
    steps; ``samples[k]``: its samples over them."""

    index: torch.Tensor     # [T, K, B] int64
    weight: torch.Tensor    # [T, K, B] float32
    steps: list[int]
    samples: list[int]

    @property
    def clients(self) -> int:
        return self.index.shape[1]

    @property
    def length(self) -> int:
        return self.index.shape[0]


def stack_batches(streams: Sequence[list[torch.Tensor]], batch_size: int) -> CohortBatches:
    """Stack the clients' batch lists (``client_batches``) into one padded block.

    A handful of tensor operations whatever the cohort's size: every batch's samples land at
    their flat positions in ``[T, K, B]`` through one scatter (writing each batch into its
    slot took two indexings per batch: 1.7 ms for 50 clients of 5 steps, now 0.35)."""
    clients = len(streams)
    length = max((len(s) for s in streams), default=0)
    lengths = [[len(b) for b in s] for s in streams]
    samples = [sum(sizes) for sizes in lengths]
    batches = [b for s in streams for b in s]
    read = torch.cat(batches).to(torch.int64) if batches else torch.zeros(0, dtype=torch.int64)
    # Padding reads one of the client's own samples, its first (finite like the rest); a
    # client without samples reads sample 0 and never uses it (all its weights are 0).
    fillers = torch.zeros(clients, dtype=torch.int64)
    firsts = torch.tensor([0] + samples[:-1], dtype=torch.int64).cumsum(0)
    some = torch.tensor(samples, dtype=torch.int64) > 0
    fillers[some] = read[firsts[some]]
    index = fillers.view(1, clients, 1).repeat(length, 1, batch_size)
    weight = torch.zeros((length, clients, batch_size), dtype=torch.float32)
    if len(read):
        sizes = torch.tensor([n for per_client in lengths for n in per_client])
        slots = torch.tensor([t * clients + k for k, s in enumerate(streams)
                              for t in range(len(s))])
        starts = torch.repeat_interleave(slots * batch_size - (sizes.cumsum(0) - sizes), sizes)
        positions = starts + torch.arange(len(starts))
        index.view(-1)[positions] = read
        weight.view(-1)[positions] = 1.0
    return CohortBatches(index, weight, [len(s) for s in streams], samples)
