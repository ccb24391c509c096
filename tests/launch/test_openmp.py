"""Workers with several threads are forked only from a process kept on one thread."""

import subprocess
import sys

import pytest

from mptrain.errors import UserError
from mptrain.launch import openmp, start_method
from mptrain.launch.start_method import choose_start_method
from mptrain.launch.tuning import apply_threads

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def kept(monkeypatch):
    """This test process as if it were the `mptrain` command's own."""
    import torch

    monkeypatch.setattr(openmp, "_kept_on_one_thread", False)
    monkeypatch.setattr(openmp, "_the_command", True)
    # Whatever earlier tests in this process ran (on a GPU machine a backward pass rules
    # fork out for another reason: tests/launch/test_autograd_fork.py).
    monkeypatch.setattr(start_method, "fork_unsafe_reason", lambda: None)
    previous = torch.get_num_threads()
    yield
    torch.set_num_threads(previous)


def test_a_command_run_inside_another_program_leaves_its_threads_alone(monkeypatch):
    # cli.main() from Python (or these tests): that process may have run OpenMP threads.
    import torch

    monkeypatch.setattr(openmp, "_kept_on_one_thread", False)
    monkeypatch.setattr(openmp, "_the_command", False)
    threads = torch.get_num_threads()
    openmp.keep_this_process_on_one_thread()
    assert torch.get_num_threads() == threads
    assert not openmp.can_fork_multithreaded_children()
    assert choose_start_method(None, "cpu", threads=2)[0] == "forkserver"


def test_only_a_process_kept_on_one_thread_forks_multithreaded_workers(kept):
    assert choose_start_method(None, "cpu", threads=2)[0] == "forkserver"
    with pytest.raises(UserError, match="would hang"):
        choose_start_method("fork", "cpu", threads=2)
    openmp.keep_this_process_on_one_thread()
    method, reason = choose_start_method(None, "cpu", threads=2)
    assert method == "fork" and "never ran OpenMP threads" in reason
    assert choose_start_method("fork", "cpu", threads=2) == ("fork", "as requested")
    assert choose_start_method(None, "cpu", threads=1)[0] == "fork"


def test_running_on_several_threads_here_ends_it(kept):
    openmp.keep_this_process_on_one_thread()
    apply_threads(1)
    assert openmp.can_fork_multithreaded_children()
    apply_threads(2)   # `single` trains in this process
    assert not openmp.can_fork_multithreaded_children()
    apply_threads(1)   # putting the count back does not take the threads away
    assert not openmp.can_fork_multithreaded_children()
    assert choose_start_method(None, "cpu", threads=2)[0] == "forkserver"


def test_run_forks_a_two_thread_worker_that_trains(tmp_path):
    # The digits CNN's convolutions run OpenMP regions on the worker's two threads: had the
    # parent started OpenMP threads before the fork, the worker would never finish a step.
    done = subprocess.run([sys.executable, "-m", "mptrain", "run", "--strategy", "sync",
                           "--workers", "1", "--threads-per-worker", "2", "--epochs", "1",
                           "--steps-per-epoch", "3", "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, cwd=tmp_path, timeout=100)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 worker × 2 threads" in done.stdout
    assert "start method fork (2 threads per worker" in done.stdout
    assert "test acc" in done.stdout
