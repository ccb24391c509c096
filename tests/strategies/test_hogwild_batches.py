"""Hogwild's shared batch queue: with several workers nobody owns a shard; each takes the
epoch's next batch, so every sample is trained exactly once per epoch whoever trains it, the
schedule sees the step a fixed shard would be at, and the sizes the parent plans with (the
progress total, the memory preflight's batch sizes) are the ones handed out. One worker
keeps its plain shard."""

import multiprocessing
from dataclasses import dataclass

import pytest
import torch
import torch.nn as nn
from torch.utils.data import TensorDataset

import mptrain
from mptrain.config import TrainConfig
from mptrain.data.sharding import batches, epoch_permutation, shard_indices
from mptrain.strategies.hogwild import HogwildStrategy

SAMPLES, BATCH, SEED = 251, 16, 3   # 16 batches, the last of 11 samples


@dataclass
class Rank:
    rank: int
    world_size: int


@dataclass
class Plan:
    workers: int


@dataclass
class Bundle:
    train: list


def prepared(workers, **settings):
    config = TrainConfig.from_settings(dict(strategy="hogwild", workers=workers, epochs=3,
                                            batch_size=BATCH, seed=SEED, **settings))
    strategy = HogwildStrategy(config)
    strategy.prepare(nn.Linear(2, 2), None, Plan(workers))
    return strategy


def take_in_turn(strategy, world, epoch, pattern):
    """Each rank's epoch plan, then batches taken in the order ``pattern`` names the ranks
    (a rank whose plan is exhausted stops asking); what each rank got, in order."""
    plans = [strategy.epoch_batches(SAMPLES, Rank(rank, world), epoch) for rank in range(world)]
    iterators = [iter(plan.batches) for plan in plans]
    got = {rank: [] for rank in range(world)}
    live = set(range(world))
    for rank in pattern:
        if rank in live:
            try:
                got[rank].append(next(iterators[rank]))
            except StopIteration:
                live.discard(rank)
    for rank in sorted(live):
        got[rank].extend(iterators[rank])
    return plans, got


@pytest.mark.parametrize("pattern", [[0, 1] * 40, [0] * 40, [1, 1, 1, 0] * 20])
def test_every_batch_of_the_epoch_goes_to_exactly_one_rank(pattern):
    strategy = prepared(2)
    plans, got = take_in_turn(strategy, 2, 1, pattern)

    expected = batches(epoch_permutation(SAMPLES, SEED, 1), BATCH)
    assert sum(len(taken) for taken in got.values()) == len(expected) == 16
    trained = torch.cat([indices for rank in got for _, indices in got[rank]])
    assert sorted(trained.tolist()) == list(range(SAMPLES))
    # Batch k of the epoch's order is step k // world of whoever took it.
    for rank in got:
        for step, indices in got[rank]:
            k = next(i for i, batch in enumerate(expected) if torch.equal(batch, indices))
            assert step == k // 2
    assert [plan.steps for plan in plans] == [8, 8]
    assert strategy.samples_per_round(Bundle([0] * SAMPLES), 2) == SAMPLES


def test_each_epoch_has_its_own_queue():
    strategy = prepared(2)
    _, first = take_in_turn(strategy, 2, 0, [0, 1] * 20)
    _, second = take_in_turn(strategy, 2, 2, [0, 1] * 20)
    assert sum(len(b) for b in first.values()) == sum(len(b) for b in second.values()) == 16
    assert not torch.equal(first[0][0][1], second[0][0][1])   # reshuffled


def test_steps_per_epoch_caps_the_queue_at_what_fixed_shards_would_train():
    strategy = prepared(2, steps_per_epoch=3)
    plans, got = take_in_turn(strategy, 2, 0, [0] * 10)
    assert len(got[0]) == 6 and got[1] == []
    assert plans[0].steps == 3
    data = Bundle([0] * SAMPLES)
    assert strategy.samples_per_round(data, 2) == 6 * BATCH
    assert strategy.batch_sizes(data, 2) == [BATCH]
    assert prepared(2).batch_sizes(data, 2) == [SAMPLES % BATCH, BATCH]


def test_one_worker_trains_its_plain_shard():
    strategy = prepared(1)
    assert strategy.batch_queue is None
    plan = strategy.epoch_batches(SAMPLES, Rank(0, 1), 1)
    shard = shard_indices(SAMPLES, 1, 0, SEED, 1)
    assert [(s, i.tolist()) for s, i in plan.batches] == \
        [(s, i.tolist()) for s, i in enumerate(batches(shard, BATCH))]


class CountingNet(nn.Module):
    """Counts, in shared memory, how often each training sample (its id in the last input
    column) goes through a worker's forward pass in training mode."""

    def __init__(self, counts):
        super().__init__()
        self.counts = counts
        self.linear = nn.Linear(3, 2)

    def forward(self, x):
        if self.training and multiprocessing.current_process().name.startswith("mptrain-worker"):
            # Different ranks add to different elements: no two touch the same one.
            self.counts.index_add_(0, x[:, -1].long(), torch.ones(len(x), dtype=torch.int32))
        return self.linear(x[:, :3])


@pytest.mark.timeout(120)
def test_a_two_worker_run_trains_every_sample_once_per_epoch_with_no_padding():
    generator = torch.Generator().manual_seed(0)
    inputs = torch.cat([torch.randn(SAMPLES, 3, generator=generator),
                        torch.arange(SAMPLES, dtype=torch.float32)[:, None]], dim=1)
    data = TensorDataset(inputs, torch.randint(2, (SAMPLES,), generator=generator))
    counts = torch.zeros(SAMPLES, dtype=torch.int32).share_memory_()
    result = mptrain.fit(CountingNet(counts), data, strategy="hogwild", workers=2, epochs=2,
                         batch_size=BATCH, optimizer="sgd", lr=0.1, threads_per_worker=1,
                         quiet=True)
    assert counts.tolist() == [2] * SAMPLES
    # Fixed shards would have padded the epoch to 252 samples.
    assert [epoch.train_samples for epoch in result.epochs] == [SAMPLES, SAMPLES]
