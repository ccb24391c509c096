"""Tests for mptrain.data.sharding: which samples each rank trains and evaluates on."""

import math
from collections import Counter

import pytest
import torch

from mptrain.data.sharding import batches, eval_shard, shard_indices

SIZES = [(10, 1), (10, 2), (10, 3), (10, 4), (1797, 4), (7, 7), (3, 8), (1, 5), (100, 6)]


def all_shards(n, world, seed=0, epoch=0, shuffle=True):
    return [shard_indices(n, world, rank, seed, epoch, shuffle) for rank in range(world)]


@pytest.mark.parametrize("n, world", SIZES)
def test_shards_have_equal_length(n, world):
    for shard in all_shards(n, world):
        assert len(shard) == math.ceil(n / world)
        assert shard.dtype == torch.int64


@pytest.mark.parametrize("n, world", SIZES)
@pytest.mark.parametrize("shuffle", [True, False])
def test_shards_cover_everything_and_overlap_only_by_the_padding(n, world, shuffle):
    flat = torch.cat(all_shards(n, world, seed=3, epoch=2, shuffle=shuffle)).tolist()
    assert set(flat) == set(range(n))
    padding = math.ceil(n / world) * world - n
    duplicates = sum(count - 1 for count in Counter(flat).values())
    assert duplicates == padding


@pytest.mark.parametrize("n, world", [(10, 2), (10, 3), (1797, 4)])
def test_epochs_reshuffle(n, world):
    first = all_shards(n, world, seed=0, epoch=0)
    second = all_shards(n, world, seed=0, epoch=1)
    assert any(not torch.equal(a, b) for a, b in zip(first, second))


@pytest.mark.parametrize("seed, epoch", [(0, 0), (0, 5), (42, 3)])
def test_same_seed_and_epoch_repeat(seed, epoch):
    for a, b in zip(all_shards(100, 3, seed, epoch), all_shards(100, 3, seed, epoch)):
        assert torch.equal(a, b)


def test_different_seeds_differ():
    assert not torch.equal(shard_indices(100, 2, 0, seed=0, epoch=0),
                           shard_indices(100, 2, 0, seed=7, epoch=0))


@pytest.mark.parametrize("n", [1, 2, 10, 1438])
def test_world_of_one_is_a_permutation(n):
    shard = shard_indices(n, 1, 0, seed=1, epoch=4)
    assert sorted(shard.tolist()) == list(range(n))


def test_no_shuffle_is_round_robin():
    assert shard_indices(5, 2, 0, 0, 0, shuffle=False).tolist() == [0, 2, 4]
    assert shard_indices(5, 2, 1, 0, 0, shuffle=False).tolist() == [1, 3, 0]


@pytest.mark.parametrize("n, world", [(10, 1), (10, 2), (10, 3), (10, 4), (359, 4), (7, 7),
                                      (0, 3), (6, 4), (9, 4), (3, 4)])
def test_eval_shard_partitions_exactly(n, world):
    shards = [eval_shard(n, world, rank) for rank in range(world)]
    assert torch.cat(shards).tolist() == list(range(n))


@pytest.mark.parametrize("n, world", [(5, 4), (1, 3), (10, 7), (3, 8)])
def test_eval_shard_past_the_end(n, world):
    shards = [eval_shard(n, world, rank) for rank in range(world)]
    assert torch.cat(shards).tolist() == list(range(n))
    assert len(shards[-1]) == 0


@pytest.mark.parametrize("n, world, batch, steps", [
    (100, 1, 10, 10), (100, 1, 32, 4), (100, 3, 10, 4), (1438, 4, 32, 12), (5, 8, 64, 1),
    (64, 2, 32, 1), (65, 2, 32, 2),
])
def test_steps_per_epoch(n, world, batch, steps):
    shard = shard_indices(n, world, 0, 0, 0)
    assert len(batches(shard, batch)) == steps


def test_batches_keep_order_and_last_is_smaller():
    parts = batches(torch.arange(7), 3)
    assert [p.tolist() for p in parts] == [[0, 1, 2], [3, 4, 5], [6]]


@pytest.mark.parametrize("n, world", SIZES)
def test_drop_last_cuts_the_tail_instead_of_padding(n, world):
    """DistributedSampler(drop_last=True): equal shards of n // world, disjoint, every one
    of them from the epoch's permutation, the same order as without it up to the cut."""
    shards = [shard_indices(n, world, rank, 3, 2, drop_last=True) for rank in range(world)]
    assert all(len(shard) == n // world for shard in shards)
    flat = torch.cat(shards).tolist()
    assert len(set(flat)) == len(flat) == n - n % world
    padded = all_shards(n, world, seed=3, epoch=2)
    assert all(torch.equal(cut, whole[:len(cut)]) for cut, whole in zip(shards, padded))


def test_drop_last_is_refused_where_no_shard_is_padded():
    import mptrain
    from mptrain.errors import UserError

    mptrain.TrainConfig(strategy="ddp", drop_last=True)
    with pytest.raises(UserError, match="drop-last does nothing with --strategy single; use --strategy sync or ddp"):
        mptrain.TrainConfig.from_settings({"strategy": "single", "drop_last": True})


@pytest.mark.parametrize("drop_last", [False, True])
def test_the_shards_are_distributed_samplers_to_the_index(drop_last):
    """What the docs promise, checked against torch's own sampler: a user moving a
    ``DistributedSampler`` loop to mptrain trains on the same samples in the same order."""
    from torch.utils.data import DistributedSampler

    for samples, world in ((17, 4), (10, 3), (5, 1), (8, 2)):
        for rank in range(world):
            for epoch in (0, 3):
                theirs = DistributedSampler(range(samples), num_replicas=world, rank=rank,
                                            seed=7, drop_last=drop_last)
                theirs.set_epoch(epoch)
                assert shard_indices(samples, world, rank, 7, epoch,
                                     drop_last=drop_last).tolist() == list(theirs)
