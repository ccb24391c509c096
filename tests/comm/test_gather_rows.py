"""``Group.gather_rows`` between real forked processes: every rank's rows reach rank 0
bitwise, in rank order; a shared-memory group sends blocks that fit its slots (a collective
per block of as many rows as fit), a torch.distributed group one gather for all (counted
on ``torch.distributed.gather`` itself), in blocks only past ``GATHER_BYTES``.

Results travel to the parent as numpy arrays (``test_shm_group`` says why)."""

import numpy as np
import pytest
import torch

from mptrain.comm import dist as comm_dist
from mptrain.comm.dist import DistSpec
from mptrain.comm.shm import ShmGroupState
from mptrain.launch.supervisor import Supervisor

from test_shm_group import assert_reaped

WIDTH = 10


def rows_of(rank: int, count: int) -> torch.Tensor:
    """Rank ``rank``'s rows: values no rounding or padding could produce by accident."""
    generator = torch.Generator().manual_seed(rank)
    return torch.randn(count, WIDTH, generator=generator) * 10.0 ** rank


def gather(group, counts, channel):
    """Gather every rank's rows; rank 0 sends what it received, every rank its count."""
    received = {}

    def receive(first, block):
        for i, row in enumerate(block):
            assert first + i not in received    # each row once
            received[first + i] = row.numpy().copy()

    calls = group.gather_rows(rows_of(group.rank, counts[group.rank]), counts,
                              receive if group.rank == 0 else None)
    channel.send((calls, [received[i] for i in sorted(received)], sorted(received)))


def over_shared_memory(rank, channel, state, counts):
    gather(state.attach(rank), counts, channel)


def over_gloo(rank, channel, spec, counts, most_bytes):
    comm_dist.GATHER_BYTES = most_bytes      # this process's own module, forked
    gathers = []
    plain = torch.distributed.gather

    def counted(*args, **kwargs):
        gathers.append(1)
        return plain(*args, **kwargs)

    torch.distributed.gather = counted
    group = spec.attach(rank)
    try:
        gather(group, counts, channel)
        channel.send(len(gathers))
    finally:
        group.close()


def run(world, target, *args):
    messages = {rank: [] for rank in range(world)}
    result = Supervisor("fork", on_message=lambda rank, m: messages[rank].append(m)).run(
        target, [args] * world)
    assert_reaped(result)
    assert result.ok, [f.describe() for f in result.failures]
    return messages


def assert_gathered(messages, counts):
    calls, rows, places = messages[0][0]
    expected = torch.cat([rows_of(rank, count) for rank, count in enumerate(counts)])
    assert places == list(range(sum(counts)))
    assert torch.equal(torch.from_numpy(np.stack(rows)), expected)
    for rank in range(1, len(counts)):
        assert messages[rank][0][1] == []       # only rank 0 receives
    return calls


@pytest.mark.timeout(60)
@pytest.mark.parametrize("counts", [[2, 7, 0], [0, 1, 12]])
def test_shared_memory_sends_blocks_that_fit_its_slots(counts):
    # Slots for 24 numbers of 8 bytes: ~4 rows of 10 float32s (less alignment) a block.
    state = ShmGroupState.create(3, 24, torch.float32, 30.0, oversubscribed=True)
    per_block = state.attach(0).collective_bytes() // (WIDTH * 4)
    assert per_block >= 2
    messages = run(3, over_shared_memory, state, counts)
    calls = assert_gathered(messages, counts)
    assert calls == sum(-(-count // per_block) for count in counts[1:])


@pytest.mark.timeout(120)
@pytest.mark.parametrize("counts, most_bytes, gathers", [
    ([3, 5], 64 << 20, 1),
    ([3, 50], 64 << 20, 1),                  # as many collectives for 50 rows as for 5
    ([0, 7], 2 * 3 * WIDTH * 4, 3),          # 3 rows of each rank a gather: ceil(7 / 3)
])
def test_gloo_gathers_every_rank_in_one_collective(counts, most_bytes, gathers):
    spec = DistSpec("gloo", 2, 60.0)
    try:
        messages = run(2, over_gloo, spec, counts, most_bytes)
    finally:
        spec.release()
    calls = assert_gathered(messages, counts)
    assert calls == gathers
    assert [messages[rank][1] for rank in range(2)] == [gathers, gathers]
