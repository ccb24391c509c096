"""Which samples each worker trains on in each epoch.

Semantics are those of ``torch.utils.data.DistributedSampler`` (shuffle; ``drop_last`` where
``--drop-last`` says so, else padding): one
seeded permutation per epoch, padded by wrapping to a multiple of the world size, rank ``r``
takes every ``world``-th index from ``r``. So the shards of one epoch are disjoint up to the
padding, cover the whole set, have equal length (synchronous strategies need equal step
counts), and are reshuffled every epoch.
"""

from __future__ import annotations

import math

import torch


def epoch_permutation(num_samples: int, seed: int, epoch: int) -> torch.Tensor:
    generator = torch.Generator()
    generator.manual_seed(seed + epoch)
    return torch.randperm(num_samples, generator=generator)


def shard_indices(num_samples: int, world_size: int, rank: int, seed: int, epoch: int,
                  shuffle: bool = True, drop_last: bool = False) -> torch.Tensor:
    """The indices rank ``rank`` trains on in ``epoch``; ``drop_last`` (``--drop-last``, as
    DistributedSampler's): the permutation's tail cut so that it divides evenly, instead of
    padded by wrapping (each epoch drops other samples, fewer than the world size)."""
    order = epoch_permutation(num_samples, seed, epoch) if shuffle else torch.arange(num_samples)
    if drop_last:
        return order[:num_samples - num_samples % world_size][rank::world_size]
    per_rank = math.ceil(num_samples / world_size)
    padding = per_rank * world_size - num_samples
    if padding:
        order = torch.cat([order, order[:padding].repeat(math.ceil(padding / num_samples))
                           [:padding]])
    return order[rank::world_size]


def batches(indices: torch.Tensor, batch_size: int):
    """Split one shard into consecutive batches; the last may be smaller."""
    return torch.split(indices, batch_size)


def eval_shard(num_samples: int, world_size: int, rank: int) -> torch.Tensor:
    """A contiguous, unpadded slice of the test set, so every sample is evaluated once."""
    per_rank = math.ceil(num_samples / world_size)
    start = min(num_samples, rank * per_rank)  # ranks past the end evaluate nothing
    return torch.arange(start, min(num_samples, (rank + 1) * per_rank))
