"""The shared-memory group between real forked processes: averages are bitwise equal on every
rank and equal the mean, broadcasts copy the source, the two-parity protocol survives many
back-to-back collectives, and a missing rank turns into a bounded CollectiveTimeout.

Both ways of waiting are exercised: spinning on the semaphore before sleeping (world size <=
cores, what a run on a big enough machine does) and yielding the core before sleeping (more
workers than cores); a rank left alone at the barrier is shown to really sleep, beat its
heartbeat and pass. Mixed dtypes travel in their own dtype: float64 is not rounded to
float32, integers are exact.

Results travel to the parent as numpy arrays: a tensor sent through a pipe would travel as a
shared-memory handle owned by a process that is about to exit.
"""

import os
import signal
import time

import numpy as np
import psutil
import pytest
import torch

from mptrain.comm.base import CollectiveTimeout
from mptrain.comm.shm import ShmGroupState
from mptrain.launch.board import ProgressBoard
from mptrain.launch.supervisor import Supervisor

SHAPES = [(3, 4), (5,), (2, 1, 3)]
NUMEL = sum(int(np.prod(shape)) for shape in SHAPES)


# -- workers -----------------------------------------------------------------------------------

def contribution(seed: int, rank: int, round_: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed * 100_003 + rank * 1_009 + round_)
    # Scales differ per round so that a stale slot from the previous parity gives a wrong mean.
    scale = 10.0 ** (round_ % 5 - 2)
    return [torch.randn(shape, generator=generator) * scale for shape in SHAPES]


def average_rounds(rank, channel, state, seed, rounds):
    group = state.attach(rank)
    for round_ in range(rounds):
        tensors = contribution(seed, rank, round_)
        group.average_(tensors)
        channel.send((round_, [t.numpy().copy() for t in tensors]))
    channel.send(("waits", group.waits.spun, group.waits.slept))


def sleep_until_the_peer_comes(rank, channel, state, board):
    """Rank 0 reaches the barrier alone; rank 1 comes only once rank 0 is asleep in it
    (marked waiting on the board) and has beaten its heartbeat from there."""
    group = state.attach(rank, board.writer(rank))
    if rank == 1:
        assert poll_until(lambda: board.waiting_ranks()[0]), "rank 0 never slept"
        marked_at = board.table[0, 1].item()
        assert poll_until(lambda: board.table[0, 1].item() > marked_at), "no beat while asleep"
    group.barrier()
    channel.send((group.waits.spun, group.waits.slept, board.waiting_ranks()[rank]))


def mixed_dtypes(rank, channel, state):
    group = state.attach(rank)
    # 1 + rank * 2**-40 is exact in float64 and rounds to 1.0 in float32.
    fine = torch.full((5,), 1.0 + rank * 2.0 ** -40, dtype=torch.float64)
    coarse = torch.full((3,), float(rank), dtype=torch.float32)
    group.average_([coarse, fine])
    big = torch.tensor([2 ** 53 + 1 + rank, -7], dtype=torch.int64)
    group.broadcast_([big, fine.clone()], src=1)
    channel.send((fine.numpy().copy(), coarse.numpy().copy(), big.numpy().copy()))


def broadcast_once(rank, channel, state, seed, src):
    group = state.attach(rank)
    tensors = contribution(seed, rank, 0)
    group.broadcast_(tensors, src=src)
    channel.send([t.numpy().copy() for t in tensors])


def alternate_collectives(rank, channel, state, seed, rounds):
    group = state.attach(rank)
    for round_ in range(rounds):
        tensors = contribution(seed, rank, round_)
        if round_ % 3 == 2:
            src = round_ % group.world_size
            group.broadcast_(tensors, src=src)
        else:
            group.average_(tensors)
        channel.send((round_, [t.numpy().copy() for t in tensors]))


def miss_the_barrier(rank, channel, state, late_rank):
    group = state.attach(rank)
    if rank == late_rank:
        return  # never arrives at the barrier
    started = time.monotonic()
    try:
        group.barrier()
    except CollectiveTimeout as err:
        channel.send(("timeout", str(err), time.monotonic() - started))
        return
    channel.send(("passed", "", time.monotonic() - started))


def hang_before_the_barrier(rank, channel, state, late_rank):
    group = state.attach(rank)
    if rank == late_rank:
        while True:
            signal.pause()  # only the supervisor's SIGTERM ends it
    group.barrier()


# -- helpers -----------------------------------------------------------------------------------

def poll_until(condition, timeout_s=10.0):
    """A bounded wait for a condition another process makes true."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def run(world, target, *args, timeout_s=30.0, oversubscribed=True):
    state = ShmGroupState.create(world, NUMEL, torch.float32, timeout_s,
                                 oversubscribed=oversubscribed)
    messages = {rank: [] for rank in range(world)}
    result = Supervisor("fork", on_message=lambda rank, m: messages[rank].append(m)).run(
        target, [(state, *args)] * world)
    assert_reaped(result)
    return result, messages


def assert_reaped(result):
    left = []
    for pid in result.pids.values():
        try:
            process = psutil.Process(pid)
            if process.ppid() == os.getpid():
                left.append((pid, process.status()))
        except psutil.NoSuchProcess:
            pass
    assert left == []


def as_tensors(arrays):
    return [torch.from_numpy(array) for array in arrays]


def expected_mean(seed, world, round_):
    per_rank = [contribution(seed, rank, round_) for rank in range(world)]
    return [torch.stack(parts).mean(dim=0) for parts in zip(*per_rank)]


# -- average -----------------------------------------------------------------------------------

@pytest.mark.timeout(60)
@pytest.mark.parametrize("world", [2, 3])
def test_average_is_bitwise_equal_on_every_rank_and_is_the_mean(world):
    result, messages = run(world, average_rounds, 7, 1)
    assert result.ok, [f.describe() for f in result.failures]

    outputs = [as_tensors(messages[rank][0][1]) for rank in range(world)]
    for rank in range(1, world):
        for mine, first in zip(outputs[rank], outputs[0]):
            assert torch.equal(mine, first)
    for got, want in zip(outputs[0], expected_mean(7, world, 0)):
        assert got.shape == want.shape
        assert torch.allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("world, waiting", [(2, "spin"), (2, "oversubscribed"), (3, "spin"),
                                            (3, "oversubscribed"), (5, "oversubscribed")])
def test_many_consecutive_averages_stay_correct(world, waiting):
    rounds = 200
    result, messages = run(world, average_rounds, 11, rounds,
                           oversubscribed=waiting == "oversubscribed")
    assert result.ok, [f.describe() for f in result.failures]

    waits = {rank: messages[rank].pop() for rank in range(world)}
    for rank in range(world):
        assert [m[0] for m in messages[rank]] == list(range(rounds))
    for round_ in range(rounds):
        outputs = [as_tensors(messages[rank][round_][1]) for rank in range(world)]
        for rank in range(1, world):
            assert all(torch.equal(a, b) for a, b in zip(outputs[rank], outputs[0])), round_
        for got, want in zip(outputs[0], expected_mean(11, world, round_)):
            assert torch.allclose(got, want, rtol=1e-5, atol=1e-6), round_


    if world == 2 and waiting == "spin":
        # Two barriers per average; in each, the rank that arrives second finds its token
        # already posted, so at least one rank passes every barrier without sleeping.
        assert sum(waits[rank][1] for rank in range(world)) >= 2 * rounds


@pytest.mark.timeout(60)
@pytest.mark.parametrize("oversubscribed", [False, True], ids=["spin-first", "yield-first"])
def test_a_rank_left_alone_at_the_barrier_sleeps_beats_and_passes(oversubscribed):
    board = ProgressBoard.create(2)
    result, messages = run(2, sleep_until_the_peer_comes, board, oversubscribed=oversubscribed)
    assert result.ok, [f.describe() for f in result.failures]

    [(spun, slept, still_waiting)] = messages[0]
    assert (spun, slept, still_waiting) == (0, 1, False)
    [(spun, slept, still_waiting)] = messages[1]
    assert (spun, slept, still_waiting) == (1, 0, False)


@pytest.mark.timeout(60)
def test_float64_and_integers_travel_in_their_own_dtype():
    result, messages = run(2, mixed_dtypes)
    assert result.ok, [f.describe() for f in result.failures]

    for rank in range(2):
        [(fine, coarse, big)] = messages[rank]
        assert fine.dtype == np.float64 and (fine == (1.0 + 2.0 ** -40) / 2 + 0.5).all()
        assert (coarse == np.float32(0.5)).all()
        assert big.tolist() == [2 ** 53 + 2, -7]  # rank 1's, exactly


# -- broadcast ---------------------------------------------------------------------------------

@pytest.mark.timeout(60)
@pytest.mark.parametrize("world, src", [(2, 0), (2, 1), (3, 2)])
def test_broadcast_copies_the_source_tensors(world, src):
    result, messages = run(world, broadcast_once, 5, src)
    assert result.ok, [f.describe() for f in result.failures]

    source = contribution(5, src, 0)
    for rank in range(world):
        for got, want in zip(as_tensors(messages[rank][0]), source):
            assert torch.equal(got, want)


@pytest.mark.timeout(60)
def test_averages_and_broadcasts_interleave_correctly():
    world, rounds = 3, 60
    result, messages = run(world, alternate_collectives, 13, rounds)
    assert result.ok, [f.describe() for f in result.failures]

    for round_ in range(rounds):
        outputs = [as_tensors(messages[rank][round_][1]) for rank in range(world)]
        if round_ % 3 == 2:
            expected = contribution(13, round_ % world, round_)
            for rank in range(world):
                assert all(torch.equal(a, b) for a, b in zip(outputs[rank], expected)), round_
        else:
            for rank in range(1, world):
                assert all(torch.equal(a, b) for a, b in zip(outputs[rank], outputs[0])), round_
            for got, want in zip(outputs[0], expected_mean(13, world, round_)):
                assert torch.allclose(got, want, rtol=1e-5, atol=1e-6), round_


# -- timeout -----------------------------------------------------------------------------------

@pytest.mark.timeout(60)
@pytest.mark.parametrize("world, late_rank", [(2, 1), (3, 0)])
def test_barrier_times_out_naming_the_late_rank(world, late_rank):
    timeout_s = 0.5
    result, messages = run(world, miss_the_barrier, late_rank, timeout_s=timeout_s)
    assert result.ok, [f.describe() for f in result.failures]

    assert messages[late_rank] == []
    for rank in range(world):
        if rank == late_rank:
            continue
        [(outcome, text, waited)] = messages[rank]
        assert outcome == "timeout"
        assert f"rank(s) [{late_rank}]" in text
        assert f"rank {rank} waited" in text
        assert timeout_s <= waited < timeout_s + 5


@pytest.mark.timeout(60)
def test_a_timed_out_barrier_fails_the_run_and_the_hung_rank_is_stopped():
    result, _ = run(2, hang_before_the_barrier, 1, timeout_s=0.5)

    assert [(f.rank, f.reason) for f in result.failures] == [(0, "raised")]
    assert "CollectiveTimeout" in result.failures[0].traceback
    assert "rank(s) [1]" in result.failures[0].traceback
    assert result.exitcodes[1] == -signal.SIGTERM


def test_a_group_of_one_rank_leaves_tensors_as_they_are_and_copies_nothing():
    state = ShmGroupState.create(1, NUMEL, torch.float32, 5.0, oversubscribed=False)
    group = state.attach(0)
    tensors = [torch.arange(6, dtype=torch.float32), torch.full((2, 3), 0.1)]
    before = [t.clone() for t in tensors]
    group.average_(tensors)
    group.broadcast_(tensors)
    group.barrier()
    assert all(torch.equal(a, b) for a, b in zip(tensors, before))
    assert not state.slots.any() and not state.results.any()   # nothing went through them
