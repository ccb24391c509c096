"""Workers are not forked from a process whose autograd device threads run, or whose CUDA
driver was initialised.

A CUDA build of torch that sees a GPU starts them at the first backward pass, and a forked
child then fails its own backward ("Unable to handle autograd's threading in combination
with fork-based multiprocessing"): on an H200, 69 tests that call ``mptrain.fit`` after
another test had trained in the same process failed that way. The CPU build never starts
them, so here a thread is given their name, which is all mptrain looks at.
"""

import ctypes
import os
import subprocess
import sys
import textwrap
import threading
import types

import pytest
import torch

from mptrain.errors import UserError
from mptrain.launch.preflight import check_spawn_ready
from mptrain.launch import start_method
from mptrain.launch.start_method import (AUTOGRAD_THREADS, CUDA_DRIVER,
                                         autograd_device_threads_started, choose_start_method,
                                         cuda_driver_initialised)


def _tasks(tmp_path, *names):
    for number, name in enumerate(names):
        (tmp_path / str(number)).mkdir(parents=True)
        (tmp_path / str(number) / "comm").write_text(name + "\n")
    return str(tmp_path)


def test_the_threads_are_found_by_their_names(tmp_path):
    assert autograd_device_threads_started(_tasks(tmp_path / "a", "python", "pt_autograd_0"))
    assert not autograd_device_threads_started(_tasks(tmp_path / "b", "python", "pt_main"))
    assert not autograd_device_threads_started(str(tmp_path / "no-proc"))


def test_a_thread_that_ends_while_the_names_are_read_is_passed_over(tmp_path):
    tasks = _tasks(tmp_path, "python", "pt_main_thread")
    (tmp_path / "2").mkdir()   # a thread gone between the listing and the read: no comm
    assert not autograd_device_threads_started(tasks)


def test_the_driver_counts_as_initialised_only_where_its_library_is_mapped(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text("7f00-7f01 r-xp 0 08:01 1 /usr/lib/libcudart.so.13\n"
                    "7f02-7f03 r-xp 0 08:01 2 /usr/lib/libnvidia-ml.so.1\n")
    assert not cuda_driver_initialised(str(maps))      # the runtime and NVML: no driver
    assert not cuda_driver_initialised(str(tmp_path / "no-proc"))


class FakeDriver:
    """libcuda as ctypes would give it, answering cuDeviceGetCount with ``code``."""

    def __init__(self, code):
        self.code = code
        self.opened_with = []

    def opener(self, name, mode):
        self.opened_with.append((name, mode))
        if self.code is None:
            raise OSError(f"{name}: not loaded")
        return self

    @property
    def cuDeviceGetCount(self):
        def count(pointer):
            return self.code
        return count


@pytest.mark.parametrize("code, initialised", [
    (0, True),        # CUDA_SUCCESS: cuInit ran, a GPU answered
    (3, False),       # CUDA_ERROR_NOT_INITIALIZED: mapped since import torch, never used
    (34, False),      # CUDA_ERROR_STUB_LIBRARY: the toolkit's stub, no driver at all
    (100, False),     # CUDA_ERROR_NO_DEVICE: cuInit failed; a child finds no CUDA either
    (None, True),     # mapped, yet not under its usual name: assumed initialised
], ids=["success", "not-initialised", "stub", "no-device", "other-name"])
def test_where_the_driver_is_mapped_its_own_answer_decides(tmp_path, monkeypatch, code,
                                                           initialised):
    maps = tmp_path / "maps"
    maps.write_text("7f00-7f01 r-xp 0 08:01 3 /usr/lib/x86_64-linux-gnu/libcuda.so.580.1\n")
    driver = FakeDriver(code)
    monkeypatch.setattr(start_method.ctypes, "CDLL", driver.opener)
    assert cuda_driver_initialised(str(maps)) is initialised
    [(name, mode)] = driver.opened_with
    assert name == "libcuda.so.1" and mode & os.RTLD_NOLOAD   # never loads it itself


def test_with_the_driver_initialised_workers_come_from_a_fork_server(monkeypatch):
    monkeypatch.setattr(start_method.torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(start_method, "autograd_device_threads_started", lambda: False)
    monkeypatch.setattr(start_method, "cuda_driver_initialised", lambda: True)
    assert choose_start_method(None, "cpu", threads=1) == ("forkserver", CUDA_DRIVER)
    with pytest.raises(UserError, match="initialised in this process.*--start-method "
                                        "forkserver or spawn"):
        choose_start_method("fork", "cpu", threads=1)


@pytest.fixture
def autograd_thread(monkeypatch):
    """A live thread of this process named as autograd's device threads are."""
    if not sys.platform.startswith("linux"):
        pytest.skip("thread names through prctl are Linux's")
    libc = ctypes.CDLL(None, use_errno=True)
    named, release = threading.Event(), threading.Event()
    result = []

    def body():
        result.append(libc.prctl(15, b"pt_autograd_0", 0, 0, 0))   # PR_SET_NAME, this thread
        named.set()
        release.wait(60)

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    assert named.wait(10) and result == [0]
    # This process's own state, whatever earlier tests did: CUDA untouched.
    monkeypatch.setattr(start_method.torch.cuda, "is_initialized", lambda: False)
    yield
    release.set()
    thread.join(10)


def test_without_the_threads_cpu_workers_are_forked(monkeypatch):
    # This process's own state, whatever earlier tests did: on a GPU machine a CUDA test
    # that ran before in the same pytest worker leaves CUDA initialised, and then spawn is
    # the right answer (seen on an H200 under -n 8, issue 40).
    monkeypatch.setattr(start_method.torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(start_method, "fork_unsafe_reason", lambda: None)
    assert choose_start_method(None, "cpu", threads=1)[0] == "fork"


def test_with_the_threads_workers_come_from_a_fork_server(autograd_thread):
    assert autograd_device_threads_started()
    assert choose_start_method(None, "cpu", threads=1) == ("forkserver", AUTOGRAD_THREADS)
    assert choose_start_method(None, "cpu", threads=2) == ("forkserver", AUTOGRAD_THREADS)


def test_with_the_threads_asking_for_fork_is_refused_with_the_fix(autograd_thread):
    with pytest.raises(UserError, match="--start-method forkserver or spawn"):
        choose_start_method("fork", "cpu", threads=1)
    assert choose_start_method("spawn", "cpu", threads=1) == ("spawn", "as requested")


def test_without_a_fork_server_they_are_spawned(autograd_thread, monkeypatch):
    monkeypatch.setattr(start_method.multiprocessing, "get_all_start_methods",
                        lambda: ["fork", "spawn"])
    assert choose_start_method(None, "cpu", threads=1) == ("spawn", AUTOGRAD_THREADS)


def test_a_notebooks_model_class_is_refused_for_a_fork_server_with_the_reason(monkeypatch):
    class Net(torch.nn.Module):
        def forward(self, x):
            return x

    Net.__module__ = "__main__"
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))  # no __file__
    with pytest.raises(UserError, match=r"Net is defined in a notebook.*not forked here: a "
                                        r"backward pass already ran.*\.py module"):
        check_spawn_ready(Net(), AUTOGRAD_THREADS)


#: The start of a script that trains in a fresh process: its model class in a .py module,
#: as a fork server needs.
SCRIPT_HEAD = textwrap.dedent("""
    import torch
    from torch.utils.data import TensorDataset
    import mptrain
    from mptrain.launch.start_method import cuda_driver_initialised

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 2)

        def forward(self, x):
            return self.layer(x)
""")

TRAIN_TWICE = SCRIPT_HEAD + textwrap.dedent("""
    if __name__ == "__main__":
        torch.manual_seed(0)
        data = TensorDataset(torch.randn(256, 4), torch.randint(0, 2, (256,)))
        mptrain.fit(Net(), data, strategy="single", epochs=1, quiet=True)
        result = mptrain.fit(Net(), data, strategy="sync", workers=2, epochs=1, quiet=True)
        print("start method", result.summary["start_method"])
""")


@pytest.mark.skipif(torch.cuda.device_count() == 0, reason="needs a CUDA device")
def test_a_process_that_trained_on_a_gpu_machine_trains_again_on_workers(tmp_path):
    script = tmp_path / "train_twice.py"
    script.write_text(TRAIN_TWICE)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=100)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "start method forkserver" in done.stdout


STEP_THEN_FORK = SCRIPT_HEAD + textwrap.dedent("""
    if __name__ == "__main__":
        print("after import and device_count", torch.cuda.device_count(),
              cuda_driver_initialised())
        weight = torch.nn.Parameter(torch.zeros(3))
        weight.grad = torch.ones(3)            # no backward pass: no autograd threads
        torch.optim.Adam([weight]).step()      # checks for CUDA-graph capture: cuInit
        print("after a step", cuda_driver_initialised())
        data = TensorDataset(torch.randn(256, 4), torch.randint(0, 2, (256,)))
        result = mptrain.fit(Net(), data, strategy="hogwild", workers=2, epochs=1,
                             optimizer="adam", quiet=True)
        print("start method", result.summary["start_method"])
""")


@pytest.mark.skipif(torch.cuda.device_count() == 0, reason="needs a CUDA device")
def test_a_process_that_stepped_an_optimizer_on_a_gpu_machine_trains_on_workers(tmp_path):
    script = tmp_path / "step_then_fork.py"
    script.write_text(STEP_THEN_FORK)
    env = {k: v for k, v in os.environ.items() if k != "PYTORCH_NVML_BASED_CUDA_CHECK"}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=100, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[0].endswith("False"), done.stdout   # NVML: no cuInit
    assert "after a step True" in done.stdout, done.stdout
    assert "start method forkserver" in done.stdout, done.stdout
