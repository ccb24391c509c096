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


def watched_by_a_busy_parent(worker) -> object:
    """``worker`` run alone under a parent whose handling of a message takes ``BUSY_S``."""
    board = ProgressBoard.create(1)
    supervisor = Supervisor("fork", heartbeat_timeout_s=TIMEOUT_S,
                            seconds_since_beat=board.seconds_since_beat,
                            waiting_ranks=board.waiting_ranks, on_message=slow_write)
    board.beat_all()
    return supervisor.run(worker, [(board,)])


@pytest.mark.timeout(60)
def test_a_worker_blocked_on_a_busy_parent_is_not_reported_hung():
    result = watched_by_a_busy_parent(report_while_the_parent_is_busy)

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
    result = watched_by_a_busy_parent(silent_after_the_parent_was_busy)

    assert [(failure.rank, failure.reason) for failure in result.failures] == [(0, "hung")]


def beat_then_finish_when_told(rank, channel, board, go):
    """Beat, then wait -- silent -- for the parent's word, and finish without beating."""
    board.writer(rank).beat()
    channel.send("started")
    go.wait(60)


@pytest.mark.timeout(60)
def test_a_parent_stopped_in_its_wait_does_not_blame_its_workers_when_it_resumes(monkeypatch):
    """Ctrl-Z stops the whole process group; after ``fg`` the parent may look at the board
    before a worker has taken its next step. Here the parent's wait returns BUSY_S late (the
    parent was stopped inside it) and the worker is silent: the parent was away, not the
    worker."""
    import multiprocessing
    import multiprocessing.connection as connection

    go = multiprocessing.get_context("fork").Event()
    real_wait, late = connection.wait, []

    def wait(objects, timeout=None):
        ready = real_wait(objects, timeout)
        if ready and not late:   # the first report: the parent is stopped right after it
            late.append(True)
            time.sleep(BUSY_S)   # the fault under test: the parent does not run meanwhile
        return ready

    def on_message(rank, payload):
        go.set()   # told only once the parent is back: the worker stays silent until then

    monkeypatch.setattr(connection, "wait", wait)
    board = ProgressBoard.create(1)
    supervisor = Supervisor("fork", heartbeat_timeout_s=TIMEOUT_S,
                            seconds_since_beat=board.seconds_since_beat,
                            waiting_ranks=board.waiting_ranks, on_message=on_message)
    board.beat_all()
    result = supervisor.run(beat_then_finish_when_told, [(board, go)])

    assert late and result.ok, [failure.describe() for failure in result.failures]
