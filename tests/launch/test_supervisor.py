"""The supervisor driven by scripted fake workers: every way a worker can end is reported as
a value, the other workers are stopped, and no process of the run is left behind.

Worker targets are module-level (``target(rank, channel, *args)``) so that the spawn case can
import them in the child.
"""

import multiprocessing
import os
import signal
import time

import psutil
import pytest
import torch

from mptrain.comm.shm import ShmGroupState
from mptrain.launch.board import ProgressBoard
from mptrain.launch.supervisor import (TERMINATE_GRACE_S, RunProcsResult, Supervisor,
                                       WorkerFailure)

FORK = multiprocessing.get_context("fork")
# Generous: a failure is noticed within a tick and the others stop on SIGTERM at once; only a
# worker that ignores SIGTERM costs the grace period.
BOUND_S = TERMINATE_GRACE_S + 10


# -- scripted workers --------------------------------------------------------------------------

def send_messages(rank, channel, count):
    for index in range(count):
        channel.send({"rank": rank, "index": index})


def block_forever():
    # Never returns on its own: only the supervisor's SIGTERM ends it.
    while True:
        signal.pause()


def raise_boom(rank, channel, bad_rank):
    if rank == bad_rank:
        raise ValueError("boom")
    block_forever()


def exit_three(rank, channel, bad_rank):
    if rank == bad_rank:
        os._exit(3)
    block_forever()


def sigkill_self(rank, channel, bad_rank):
    if rank == bad_rank:
        os.kill(os.getpid(), signal.SIGKILL)
    block_forever()


def exit_zero_early(rank, channel, bad_rank):
    # A clean exit status, but before the bootstrap could report "done".
    if rank == bad_rank:
        os._exit(0)
    block_forever()


def ignore_sigterm_then_fail(rank, channel, ready):
    if rank == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        ready.set()
        block_forever()
    # Fail only once rank 0 is known to ignore SIGTERM, so the escalation is exercised.
    if not ready.wait(timeout=30):
        raise TimeoutError("rank 0 never became ready")
    raise ValueError("boom")


def finish_or_hang(rank, channel, board, hung_rank):
    if rank == hung_rank:
        block_forever()  # never touches its heartbeat
    board.writer(rank).beat()


def silent_or_waiting(rank, channel, board, silent_rank):
    """The silent rank beats once, then stops; the others wait for it, as a rank blocked at
    a collective does: marked waiting, beating (bounded: the supervisor stops them first)."""
    writer = board.writer(rank)
    if rank == silent_rank:
        writer.beat()
        block_forever()
    writer.waiting(True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        writer.beat()
        time.sleep(0.05)  # a heartbeat period, not synchronisation
    raise TimeoutError("the supervisor never stopped this waiting rank")


def stop_before_the_barrier(rank, channel, state, board, stopped_rank):
    """A real shared-memory barrier; the stopped rank freezes (SIGSTOP) before reaching it."""
    group = state.attach(rank, board.writer(rank))
    if rank == stopped_rank:
        os.kill(os.getpid(), signal.SIGSTOP)
    group.barrier()


def report_siblings(rank, channel, all_counted):
    # The parent's children when this one starts working: the run's workers, and whatever
    # else the test process runs (on a GPU machine multiprocessing's fork server and resource
    # tracker, which stay up for the life of the process, were two more); nobody exits (and
    # is reaped) before everyone has counted.
    channel.send(sorted(child.pid for child in psutil.Process(os.getppid()).children()))
    all_counted.wait()


def wait_for_tick(rank, channel, ticked):
    if not ticked.wait(timeout=30):
        raise TimeoutError("on_tick was never called")


def send_tensor(rank, channel):
    channel.send(torch.arange(4, dtype=torch.float32) + rank)


# -- helpers -----------------------------------------------------------------------------------

def leftover_processes(result: RunProcsResult) -> list:
    """Processes of the run still alive or unreaped (a zombie child is a leak too)."""
    left = []
    for pid in result.pids.values():
        try:
            process = psutil.Process(pid)
            if process.ppid() == os.getpid():
                left.append((pid, process.status()))
        except psutil.NoSuchProcess:
            pass
    return left


@pytest.fixture
def keep_default_start_method():
    """Starting a spawn or forkserver process fixes this process's default start method as a
    side effect (``multiprocessing.spawn.get_preparation_data`` calls ``get_start_method()``);
    undo it so that later tests find the state they would find alone."""
    default = multiprocessing.context._default_context
    saved = default._actual_context
    yield
    default._actual_context = saved


def run_timed(supervisor, target, args_per_rank):
    started = time.monotonic()
    result = supervisor.run(target, args_per_rank)
    return result, time.monotonic() - started


# -- success -----------------------------------------------------------------------------------

@pytest.mark.timeout(60)
def test_all_workers_succeed_and_every_message_reaches_on_message():
    received = []
    supervisor = Supervisor("fork", on_message=lambda rank, payload: received.append((rank,
                                                                                       payload)))
    result = supervisor.run(send_messages, [(3,)] * 3)

    assert result.ok
    assert result.failures == []
    assert result.exitcodes == {0: 0, 1: 0, 2: 0}
    assert sorted(result.pids) == [0, 1, 2]
    for rank in range(3):
        mine = [payload for r, payload in received if r == rank]
        # Per rank, messages arrive complete and in the order they were sent.
        assert mine == [{"rank": rank, "index": i} for i in range(3)]
    assert len(received) == 9
    assert leftover_processes(result) == []


@pytest.mark.timeout(60)
def test_on_tick_is_called_while_workers_run():
    ticked = FORK.Event()
    result = Supervisor("fork", on_tick=ticked.set, tick_s=0.01).run(wait_for_tick,
                                                                     [(ticked,)] * 2)
    assert result.ok, [f.describe() for f in result.failures]
    assert leftover_processes(result) == []


# -- failures ----------------------------------------------------------------------------------

@pytest.mark.timeout(60)
@pytest.mark.parametrize("target, reason, exitcode, signal_name", [
    (raise_boom, "raised", 1, None),
    (exit_three, "exited", 3, None),
    (sigkill_self, "signal", -signal.SIGKILL, "SIGKILL"),
    (exit_zero_early, "exited", 0, None),
], ids=["raised", "exit-3", "sigkill", "exit-0-before-done"])
def test_one_failing_rank_is_reported_and_the_others_are_stopped(target, reason, exitcode,
                                                                  signal_name):
    bad_rank = 1
    result, elapsed = run_timed(Supervisor("fork"), target, [(bad_rank,)] * 3)

    assert not result.ok
    assert len(result.failures) == 1
    failure = result.failures[0]
    assert failure.rank == bad_rank
    assert failure.pid == result.pids[bad_rank]
    assert failure.reason == reason
    assert failure.exitcode == exitcode
    assert failure.signal_name == signal_name
    if reason == "raised":
        assert "ValueError: boom" in failure.traceback
        assert "raise_boom" in failure.traceback
    else:
        assert failure.traceback is None
    # The blocked ranks did not fail on their own: the supervisor terminated them.
    for rank in (0, 2):
        assert result.exitcodes[rank] == -signal.SIGTERM
    assert result.exitcodes[bad_rank] == exitcode
    assert elapsed < BOUND_S
    assert leftover_processes(result) == []


@pytest.mark.timeout(60)
def test_a_worker_ignoring_sigterm_is_killed_after_the_grace_period():
    ready = FORK.Event()
    result, elapsed = run_timed(Supervisor("fork"), ignore_sigterm_then_fail, [(ready,)] * 2)

    assert [(f.rank, f.reason) for f in result.failures] == [(1, "raised")]
    assert "ValueError: boom" in result.failures[0].traceback
    assert result.exitcodes[0] == -signal.SIGKILL
    assert elapsed < BOUND_S
    assert leftover_processes(result) == []


@pytest.mark.timeout(60)
def test_a_rank_without_heartbeat_is_reported_hung():
    board = ProgressBoard.create(2)
    supervisor = Supervisor("fork", heartbeat_timeout_s=1.0,
                            seconds_since_beat=board.seconds_since_beat)
    board.beat_all()
    result, elapsed = run_timed(supervisor, finish_or_hang, [(board, 1)] * 2)

    assert [(f.rank, f.reason) for f in result.failures] == [(1, "hung")]
    failure = result.failures[0]
    assert failure.pid == result.pids[1]
    assert "made no progress" in failure.describe()
    # Where it was stuck, from the worker's entry down (not the test's frames that forked it)
    assert "in block_forever" in failure.traceback and "in finish_or_hang" in failure.traceback
    assert failure.traceback.rstrip().endswith(" in _bootstrap")
    assert "run_timed" not in failure.traceback
    # The healthy rank finished; the hung one was stopped.
    assert result.exitcodes == {0: 0, 1: -signal.SIGTERM}
    assert elapsed < BOUND_S
    assert leftover_processes(result) == []


@pytest.mark.timeout(60)
def test_a_silent_rank_is_hung_and_the_ranks_waiting_for_it_are_not_blamed():
    board = ProgressBoard.create(3)
    supervisor = Supervisor("fork", heartbeat_timeout_s=1.0,
                            seconds_since_beat=board.seconds_since_beat,
                            waiting_ranks=board.waiting_ranks)
    board.beat_all()
    result, elapsed = run_timed(supervisor, silent_or_waiting, [(board, 1)] * 3)

    assert [(f.rank, f.reason) for f in result.failures] == [(1, "hung")]
    failure = result.failures[0]
    assert failure.waiting_ranks == (0, 2)
    text = failure.describe()
    assert f"worker rank 1 (pid {result.pids[1]}) made no progress for 1 s" in text
    assert "ranks 0, 2 were waiting for it at a collective" in text
    assert elapsed < BOUND_S
    assert leftover_processes(result) == []


@pytest.mark.timeout(60)
def test_a_stopped_rank_is_named_and_the_rank_waiting_at_the_barrier_is_not():
    # The case: SIGSTOP on rank 1 with a short --worker-timeout, rank 0 at a real
    # collective. The waiting rank sleeps in the barrier, beating; the stopped one is silent.
    timeout_s = 1.0
    board = ProgressBoard.create(2)
    state = ShmGroupState.create(2, 16, torch.float32, timeout_s, oversubscribed=False)
    supervisor = Supervisor("fork", heartbeat_timeout_s=timeout_s,
                            seconds_since_beat=board.seconds_since_beat,
                            waiting_ranks=board.waiting_ranks)
    board.beat_all()
    result, elapsed = run_timed(supervisor, stop_before_the_barrier, [(state, board, 1)] * 2)

    assert [(f.rank, f.reason) for f in result.failures] == [(1, "hung")]
    assert "rank 0 was waiting for it at a collective" in result.failures[0].describe()
    # A stopped process is not asked for its stack: it could only answer once resumed, and
    # waiting would let rank 0's collective time out first.
    assert result.failures[0].traceback is None
    # Both stopped by SIGTERM, the frozen one too (the supervisor resumes it to let it die),
    # not by the SIGKILL that ends the grace period.
    assert result.exitcodes == {0: -signal.SIGTERM, 1: -signal.SIGTERM}
    assert elapsed < BOUND_S
    assert leftover_processes(result) == []


@pytest.mark.timeout(60)
def test_hung_description_states_the_real_timeout():
    board = ProgressBoard.create(1)
    supervisor = Supervisor("fork", heartbeat_timeout_s=0.5,
                            seconds_since_beat=board.seconds_since_beat)
    board.beat_all()
    result = supervisor.run(finish_or_hang, [(board, 0)])

    assert leftover_processes(result) == []
    failure = result.failures[0]
    assert failure.reason == "hung"
    assert "0.5 s" in failure.describe()


# -- start -------------------------------------------------------------------------------------

@pytest.mark.timeout(60)
def test_no_worker_starts_working_before_every_worker_is_started():
    # Early workers wait at the start gate: they cannot take the cores the parent needs to
    # start the others.
    workers = 6
    seen = {}
    all_counted = FORK.Barrier(workers, timeout=30)
    result = Supervisor("fork", on_message=seen.__setitem__).run(report_siblings,
                                                                  [(all_counted,)] * workers)
    assert result.ok, [f.describe() for f in result.failures]
    assert sorted(seen) == list(range(workers))
    run_workers = set(result.pids.values())
    assert len(run_workers) == workers
    for rank, children in seen.items():
        assert run_workers <= set(children), f"rank {rank} started before all its siblings"
    assert leftover_processes(result) == []


# -- descriptions ------------------------------------------------------------------------------

@pytest.mark.parametrize("failure, words", [
    (WorkerFailure(2, 4242, "raised", 1, traceback="Traceback...\nValueError: boom\n"),
     ["raised ValueError: boom"]),
    (WorkerFailure(2, 4242, "exited", 3), ["exited with code 3"]),
    (WorkerFailure(2, 4242, "signal", -9, signal_name="SIGKILL"), ["killed by SIGKILL"]),
    (WorkerFailure(2, 4242, "hung", timeout_s=5), ["no progress for 5 s", "--worker-timeout"]),
    (WorkerFailure(2, 4242, "hung", timeout_s=5, waiting_ranks=(0,)),
     ["no progress for 5 s", "rank 0 was waiting for it", "--worker-timeout"]),
], ids=["raised", "exited", "signal", "hung", "hung-with-waiting"])
def test_describe_names_rank_pid_and_cause(failure, words):
    text = failure.describe()
    assert "rank 2" in text
    assert "pid 4242" in text
    for word in words:
        assert word in text


def _formatted(raise_it) -> str:
    """What a worker sends of what it raised: ``traceback.format_exc()``."""
    import traceback

    try:
        raise_it()
    except Exception:  # noqa: BLE001 - formatted as _bootstrap does
        return traceback.format_exc()


def _multi_line():
    raise RuntimeError("mat1 and mat2 shapes cannot be multiplied\n(2x4 and 8x2)\n  at x")


def _chained():
    try:
        raise KeyError("first")
    except KeyError:
        raise ValueError("second, while handling the first\nmore") from None


def _chained_implicitly():
    try:
        raise KeyError("first")
    except KeyError:
        raise ValueError("second\nsecond's detail")


def _empty_first_line():
    raise ValueError("\nthe message starts on the next line")


@pytest.mark.parametrize("raise_it, cause", [
    # The summary took the traceback's last line: "raised   at x".
    (_multi_line, "raised RuntimeError: mat1 and mat2 shapes cannot be multiplied"),
    (_chained, "raised ValueError: second, while handling the first"),
    (_chained_implicitly, "raised ValueError: second"),
    (_empty_first_line, "raised ValueError: the message starts on the next line"),
], ids=["multi-line", "chained", "chained-implicitly", "empty-first-line"])
def test_describe_takes_the_exception_line_of_a_multi_line_message(raise_it, cause):
    text = WorkerFailure(2, 4242, "raised", 1, traceback=_formatted(raise_it)).describe()
    assert text == f"worker rank 2 (pid 4242) {cause}"


def test_describe_of_a_very_long_exception_line_is_bounded():
    def long():
        raise ValueError("word " * 400)

    text = WorkerFailure(2, 4242, "raised", 1, traceback=_formatted(long)).describe()
    assert text.startswith("worker rank 2 (pid 4242) raised ValueError: word word")
    assert len(text) < 300


@pytest.mark.timeout(60)
def test_describe_of_a_real_failure_names_its_rank_and_pid():
    result = Supervisor("fork").run(exit_three, [(0,)] * 2)
    failure = result.failures[0]
    text = failure.describe()
    assert f"rank {failure.rank}" in text
    assert f"pid {result.pids[failure.rank]}" in text
    assert "code 3" in text
    assert leftover_processes(result) == []


# -- start methods -----------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.usefixtures("keep_default_start_method")
def test_spawn_worker_that_raises_is_reported_with_its_traceback():
    result, elapsed = run_timed(Supervisor("spawn"), raise_boom, [(0,)] * 2)

    assert [(f.rank, f.reason) for f in result.failures] == [(0, "raised")]
    assert "ValueError: boom" in result.failures[0].traceback
    assert result.exitcodes[1] == -signal.SIGTERM
    assert leftover_processes(result) == []


@pytest.mark.timeout(120)
@pytest.mark.usefixtures("keep_default_start_method")
def test_forkserver_workers_run():
    result = Supervisor("forkserver").run(send_messages, [(1,)] * 2)
    assert result.ok, [f.describe() for f in result.failures]


# -- messages ----------------------------------------------------------------------------------

@pytest.mark.timeout(60)
def test_a_tensor_message_arrives_and_the_run_succeeds():
    received = {}
    result = Supervisor("fork", on_message=received.__setitem__).run(send_tensor, [()] * 2)
    assert leftover_processes(result) == []
    assert result.ok, [f.describe() for f in result.failures]
    for rank in range(2):
        assert torch.equal(received[rank], torch.arange(4, dtype=torch.float32) + rank)


# -- processes whose ranks take turns (launch.turns) ------------------------------------------

def _hung_in_hosted_processes(silent_s, waiting):
    """What the watchdog blames with processes 0 and 1 hosting ranks 0-1 and 2-3."""
    supervisor = Supervisor("fork", heartbeat_timeout_s=1.0,
                            seconds_since_beat=lambda: silent_s,
                            waiting_ranks=lambda: waiting,
                            ranks_of_processes=[[0, 1], [2, 3]])
    supervisor._attended_since = 0.0   # long released
    return supervisor._hung_ranks({0: None, 1: None})


@pytest.mark.parametrize("silent_s, waiting, blamed", [
    # Rank 3 runs and stopped; rank 2 waits for its turn, silent too: only 3 is blamed.
    ([0, 0, 5, 5], [True, False, True, False], [(1, 3)]),
    # Rank 2 waits, silent, while rank 3 of its process beats: nothing is hung.
    ([0, 0, 5, 0], [True, False, True, False], []),
    # The whole process fell silent while every rank of it waited (stopped while asleep).
    ([0, 0, 5, 5], [False, False, True, True], [(1, 2), (1, 3)]),
], ids=["running-rank", "slow-turn", "whole-process"])
def test_in_a_process_of_several_ranks_the_one_that_stopped_is_blamed(silent_s, waiting,
                                                                      blamed):
    assert _hung_in_hosted_processes(silent_s, waiting) == blamed


@pytest.mark.parametrize("failure, text", [
    (WorkerFailure(1, 4242, "raised", 1, process_ranks=(2, 3), traceback=(
        "Traceback...\nmptrain.launch.turns.HostedRankFailed: rank 3: ValueError: boom\n")),
     "rank 3 in the worker process of ranks 2-3 (pid 4242) raised ValueError: boom"),
    (WorkerFailure(1, 4242, "signal", -9, signal_name="SIGKILL", process_ranks=(2, 3)),
     "the worker process of ranks 2-3 (pid 4242) was killed by SIGKILL"),
    (WorkerFailure(3, 4242, "hung", timeout_s=5, process_ranks=(2, 3)),
     "rank 3 in the worker process of ranks 2-3 (pid 4242) made no progress for 5 s"),
    (WorkerFailure(1, 4242, "raised", 1, process_ranks=(4,), traceback=(
        "Traceback...\nmptrain.launch.turns.HostedRankFailed: rank 4: ValueError: boom\n")),
     "rank 4 in the worker process of rank 4 (pid 4242) raised ValueError: boom"),
], ids=["raised", "signal", "hung", "one-rank"])
def test_describe_names_the_ranks_of_a_process_that_hosted_several(failure, text):
    assert failure.describe().startswith(text)
    assert failure.who().startswith("the worker process of rank")



def test_a_hung_workers_stack_follows_the_message_under_its_own_header():
    from mptrain.launch.attempt import describe_failures

    stack = 'Current thread 0x1 (most recent call first):\n  File "m.py", line 3 in forward'
    lines = describe_failures([WorkerFailure(1, 4242, "hung", timeout_s=5,
                                             traceback=stack)]).splitlines()
    assert "made no progress for 5 s" in lines[0]
    assert lines[1:] == ["--- where worker rank 1 was stuck when stopped ---", *stack.splitlines()]


def test_stopping_leaves_an_ignored_stop_signal_ignored():
    # Under nohup SIGHUP is ignored: stopping the workers must neither take it over nor
    # hand it back as anything but ignored.
    from mptrain.launch.supervisor import _signals_redirected

    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with _signals_redirected(lambda signum, frame: None):
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) != signal.SIG_IGN
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before)
