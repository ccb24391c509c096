"""A parent busy with a worker's message (writing a slow checkpoint) is not a hung worker.

While the parent writes a checkpoint it reads no pipe, and a worker sending its next report
blocks until the parent is back: it cannot beat meanwhile. The watchdog counted that time as
the worker's silence, so ``mptrain run --checkpoint-every 1 --worker-timeout 3`` with a
checkpoint that took 6 s to write stopped both healthy workers as "made no progress for 3 s".
"""

from __future__ import annotations

import time

import pytest

from mptrain.launch.board import ProgressBoard
from mptrain.launch.supervisor import Supervisor

TIMEOUT_S = 1.0
BUSY_S = 3 * TIMEOUT_S      # the parent's slow write, longer than the watchdog's timeout
BIG = bytes(4 * 2**20)      # far more than a pipe holds: the send waits for the parent


def report_while_the_parent_is_busy(rank, channel, board):
    """Beat, report once (the parent then writes for BUSY_S), send a report too big for
    the pipe -- blocked until the parent reads it -- and finish without beating again."""
    board.writer(rank).beat()
    channel.send("write a checkpoint")
    channel.send(BIG)


def slow_write(rank, payload):
    if payload == "write a checkpoint":
        time.sleep(BUSY_S)   # the fault under test: the parent's own work takes this long


@pytest.mark.timeout(60)
def test_a_worker_blocked_on_a_busy_parent_is_not_reported_hung():
    board = ProgressBoard.create(1)
    supervisor = Supervisor("fork", heartbeat_timeout_s=TIMEOUT_S,
                            seconds_since_beat=board.seconds_since_beat,
                            waiting_ranks=board.waiting_ranks, on_message=slow_write)
    board.beat_all()
    result = supervisor.run(report_while_the_parent_is_busy, [(board,)])

    assert result.ok, [failure.describe() for failure in result.failures]
    assert result.exitcodes == {0: 0}


def silent_after_the_parent_was_busy(rank, channel, board):
    board.writer(rank).beat()
    channel.send("write a checkpoint")
    channel.send(BIG)
    while True:          # then stops for good, never beating: a hang after all
        time.sleep(60)


@pytest.mark.timeout(60)
def test_a_worker_that_stops_after_the_parent_is_back_is_still_reported_hung():
    board = ProgressBoard.create(1)
    supervisor = Supervisor("fork", heartbeat_timeout_s=TIMEOUT_S,
                            seconds_since_beat=board.seconds_since_beat,
                            waiting_ranks=board.waiting_ranks, on_message=slow_write)
    board.beat_all()
    result = supervisor.run(silent_after_the_parent_was_busy, [(board,)])

    assert [(failure.rank, failure.reason) for failure in result.failures] == [(0, "hung")]
