"""The shared ticket counters between real processes: every number of a counter goes to
exactly one taker, whichever process asks, counters are independent, and a counter that
travelled pickled (spawn) is the same counter, not a copy -- a copy would make every worker
train every batch."""

import pytest

from mptrain.comm.tickets import SharedTickets
from mptrain.launch.supervisor import Supervisor

from run_watch import live_children


def take_until(rank, channel, tickets, slot, count):
    taken = []
    while (ticket := tickets.take(slot)) < count:
        taken.append(ticket)
    channel.send((taken, ticket))


def taken_by_rank(start_method, world, tickets, slot, count):
    messages = {}
    result = Supervisor(start_method, on_message=lambda rank, m: messages.setdefault(rank, m)
                        ).run(take_until, [(tickets, slot, count)] * world)
    assert result.ok, [f.describe() for f in result.failures]
    assert live_children() == []
    return messages


@pytest.mark.timeout(120)
@pytest.mark.parametrize("start_method, world", [("fork", 2), ("fork", 4), ("spawn", 2)])
def test_every_number_goes_to_exactly_one_process(start_method, world):
    count = 2_000
    tickets = SharedTickets.create(slots=3)
    messages = taken_by_rank(start_method, world, tickets, 1, count)

    everything = [t for taken, _ in messages.values() for t in taken]
    assert sorted(everything) == list(range(count))
    # Each process stops at its first number past the end: those are the next ones.
    assert sorted(last for _, last in messages.values()) == list(range(count, count + world))
    for taken, _ in messages.values():
        assert taken == sorted(taken)   # one process sees its own numbers in order
    assert tickets.take(1) == count + world and tickets.take(0) == 0 and tickets.take(2) == 0


def test_counters_are_independent_and_count_from_zero_in_one_process():
    tickets = SharedTickets.create(slots=2)
    assert [tickets.take(0) for _ in range(3)] == [0, 1, 2]
    assert [tickets.take(1) for _ in range(2)] == [0, 1]
    assert tickets.take(0) == 3
