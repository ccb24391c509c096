"""Real faults in real runs: ``mptrain run`` as a subprocess whose workers raise, exit, die of
a signal or hang, and whose parent is interrupted or killed.

Whatever happens, the run must end within seconds of the fault, with an exit code and a
message that say what went wrong (and how to resume, when it was stopped), and leave no
process and no /dev/shm entry behind.

Nothing here sleeps to synchronise. The model factory (``faulty_workload.py``, copied into tmp_path)
drops marker files: ``started-<pid>`` when a worker takes its first step, ``fault-<pid>``
with a ``time.time()`` stamp just before the chosen worker misbehaves. The misbehaving worker
waits for a gate file that the test creates only after it has recorded the run's processes,
so no fault can end the run before the test knows every pid to check.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from mptrain import checkpoint as checkpoints
from mptrain.launch.supervisor import TERMINATE_GRACE_S
from mptrain.launch.tuning import usable_cores
from run_watch import creator, poll, shm_entries  # noqa: E402

SHM = Path("/dev/shm")
STARTUP_S = 60.0   # deadline for workers to take their first step (torch import on 2 cores)
EXIT_S = 5.0       # fault -> parent exit
LEFTOVER_S = 5.0   # parent exit -> every process of the run gone, /dev/shm as before

# The data and model factories the runs use; copied into tmp_path for each run.
FACTORY_FILE = Path(__file__).with_name("faulty_workload.py")


def _starter(cores: int | None):
    """What the run's process does before it runs: with ``cores``, keep to that many of this
    machine's cores (the same layout on 2 cores or 16). It takes Ctrl-C as in a terminal,
    however the suite was started (tests/conftest.py)."""
    if not cores:
        return None
    allowed = sorted(os.sched_getaffinity(0))[:cores]
    return lambda: os.sched_setaffinity(0, allowed)


class Run:
    """One ``mptrain run`` subprocess in its own session, with the factory's markers."""

    def __init__(self, folder: Path, args: list[str], env: dict[str, str], gated: bool,
                 cores: int | None = None):
        self.folder = folder
        self.gate = folder / "gate"
        number = len(list(folder.glob("stderr-*")))
        self.stdout_path = folder / f"stdout-{number}.txt"
        self.stderr_path = folder / f"stderr-{number}.txt"
        self.shm_before = shm_entries()
        self.tree: dict[int, psutil.Process] = {}
        full_env = dict(os.environ, FAULT_DIR=str(folder), **env)
        if gated:
            full_env["FAULT_GATE"] = str(self.gate)
        with open(self.stderr_path, "w") as err, open(self.stdout_path, "w") as out:
            # Files, not pipes: torch_shm_manager inherits the descriptors and outlives the
            # run by a second or two, which would make reading a pipe to EOF wait for it.
            self.proc = subprocess.Popen([sys.executable, "-m", "mptrain", "run", *args],
                                         cwd=folder, env=full_env, stdout=out, stderr=err,
                                         start_new_session=True, preexec_fn=_starter(cores))
        self.tree[self.proc.pid] = psutil.Process(self.proc.pid)

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text()

    @property
    def stdout(self) -> str:
        return self.stdout_path.read_text()

    def markers(self, prefix: str) -> dict[int, float]:
        found = {}
        for path in self.folder.glob(f"{prefix}-*"):
            if path.suffix == ".tmp" or not path.name[len(prefix) + 1:].isdigit():
                continue
            found[int(path.name[len(prefix) + 1:])] = float(path.read_text())
        return found

    def wait_for_workers(self, count: int = 2) -> list[int]:
        """Wait until ``count`` workers train, then record every process of the run."""
        started = poll(lambda: len(self.markers("started")) >= count or self.proc.poll()
                       is not None, STARTUP_S)
        assert started and self.proc.poll() is None, \
            f"workers did not start (exit {self.proc.returncode}):\n{self.stderr}"
        self.record_tree()
        return sorted(self.markers("started"))

    def record_tree(self) -> None:
        try:
            children = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            children = []
        for process in children:
            self.tree.setdefault(process.pid, process)
        for pid in self.markers("started"):
            try:
                self.tree.setdefault(pid, psutil.Process(pid))
            except psutil.NoSuchProcess:
                pass

    def release_fault(self) -> tuple[int, float]:
        """Open the gate; return (pid, time.time()) of the worker that then misbehaves."""
        self.gate.touch()
        fault = poll(lambda: self.markers("fault") or self.proc.poll() is not None, STARTUP_S)
        assert isinstance(fault, dict), f"no worker misbehaved:\n{self.stderr}"
        ((pid, at),) = fault.items()
        return pid, at

    def finish(self, timeout: float) -> float:
        """Wait for the parent to exit (and reap it); return time.time() at its exit."""
        self.proc.wait(timeout=timeout)
        return time.time()

    def leftovers(self) -> tuple[list[str], set[str]]:
        """The run's processes still alive, and what is new in /dev/shm and this run's: a
        segment named after a process outside the run is another test's, whose creator may
        be gone while its torch_shm_manager has yet to unlink it (seen with 14 tests at a
        time on a 16-core machine)."""
        alive = []
        for pid, process in self.tree.items():
            try:
                if not process.is_running():
                    continue
                status = process.status()
                # A zombie is dead; it only counts when it is ours to reap.
                if status != psutil.STATUS_ZOMBIE or process.ppid() == os.getpid():
                    alive.append(f"{pid} {process.name()} ({status})")
            except psutil.NoSuchProcess:
                continue
        return alive, {name for name in shm_entries() - self.shm_before
                       if creator(name) in self.pids()}

    def pids(self) -> set[int | None]:
        """Whose segments are the run's: its recorded processes and every worker that
        started (None: a name that gives no creator counts too)."""
        return {None, *self.tree, *self.markers("started")}

    def kill(self) -> None:
        """Test teardown: whatever a failed test left running goes."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        for process in self.tree.values():
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass


@pytest.fixture
def start_run(tmp_path):
    factory = tmp_path / "faulty.py"
    factory.write_text(FACTORY_FILE.read_text())
    runs = []

    def start(strategy, extra=(), env=None, quiet=True, workers=2, data_and_model=True,
              gated=True, cores=None):
        args = ["--strategy", strategy, "--workers", str(workers)] if strategy else []
        if data_and_model:
            args += ["--data", f"{factory}:make_data", "--model", f"{factory}:make_model"]
        args += list(extra) + (["--quiet"] if quiet else [])
        run = Run(tmp_path, args, {k: str(v) for k, v in (env or {}).items()}, gated, cores)
        runs.append(run)
        return run

    yield start
    for run in runs:
        run.kill()


def assert_nothing_left(run: Run) -> None:
    """The parent is reaped; within LEFTOVER_S no process of the run is alive (a zombie
    counts when it is ours) and /dev/shm holds nothing that was not there before."""
    assert run.proc.returncode is not None
    left = poll(lambda: not any(run.leftovers()) or None, LEFTOVER_S)
    alive, new_shm = run.leftovers()
    assert left and not alive, f"processes of the run still alive: {alive}"
    others = sorted(shm_entries() - run.shm_before - new_shm)
    assert not new_shm, f"left in {SHM}: {sorted(new_shm)} (the run's pids: " \
        f"{sorted(pid for pid in run.pids() if pid)}; new and not counted: {others})"


def assert_file_system_in_use(run: Run) -> None:
    """Under file_system the run's tensors are named files in /dev/shm: the leak check then
    checks something."""
    assert any(name.startswith("torch_") and creator(name) in run.pids()
               for name in shm_entries() - run.shm_before), \
        "file_system sharing put nothing in /dev/shm"


# -- a worker fails -----------------------------------------------------------------------

WORKER_FAULT_WORDS = {
    "raise": "raised RuntimeError: injected fault in pid {pid}",
    "exit3": "exited with code 3 before finishing",
    "sigkill": "was killed by SIGKILL",
    "sigsegv": "was killed by SIGSEGV",
}


# Each fault once, each strategy and each sharing strategy twice: the parent finds a dead
# worker the same way whichever strategy it ran, so a fault need not be repeated across them
# (raise under sync without file_system is also test_strategies'
# test_a_worker_raising_in_forward_fails_the_run_and_leaves_no_process, in-process).
@pytest.mark.timeout(120)
@pytest.mark.parametrize("fault, strategy, sharing", [
    pytest.param("raise", "hogwild", "file_system", id="raise-hogwild-file_system"),
    pytest.param("sigkill", "sync", "file_system", id="sigkill-sync-file_system"),
    pytest.param("exit3", "hogwild", "auto", id="exit3-hogwild", marks=pytest.mark.slow),
    pytest.param("sigsegv", "sync", "auto", id="sigsegv-sync", marks=pytest.mark.slow),
])
def test_a_failing_worker_ends_the_run_with_its_rank_pid_and_cause(start_run, fault, strategy,
                                                                   sharing):
    run = start_run(strategy, ["--epochs", "50", "--sharing-strategy", sharing],
                    env={"FAULT": fault, "STEP_DELAY": 0.01})
    run.wait_for_workers()
    if sharing == "file_system":
        assert_file_system_in_use(run)
    pid, fault_at = run.release_fault()
    exited_at = run.finish(timeout=60)

    assert run.proc.returncode == 1, run.stderr
    words = WORKER_FAULT_WORDS[fault].format(pid=pid)
    assert re.search(rf"worker rank \d+ \(pid {pid}\) {re.escape(words)}", run.stderr), \
        run.stderr
    if fault == "raise":
        assert "Traceback" in run.stderr and f"injected fault in pid {pid}" in run.stderr
    assert exited_at - fault_at < EXIT_S
    assert_nothing_left(run)


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("strategy", ["sync", "hogwild"])
def test_a_hung_worker_is_found_and_stopped_after_the_worker_timeout(start_run, strategy):
    timeout_s = 3
    run = start_run(strategy, ["--epochs", "50", "--worker-timeout", str(timeout_s)],
                    env={"FAULT": "hang", "STEP_DELAY": 0.01})
    run.wait_for_workers()
    pid, fault_at = run.release_fault()
    exited_at = run.finish(timeout=60)

    assert run.proc.returncode == 1, run.stderr
    assert re.search(rf"worker rank \d+ \(pid {pid}\) made no progress for {timeout_s} s",
                     run.stderr), run.stderr
    assert exited_at - fault_at < timeout_s + EXIT_S
    assert_nothing_left(run)


# -- ranks that take turns in a worker process ------------------------------------------

# Workers whose ranks take turns, two in each process of a core (``launch.turns``), on as
# many cores wherever the tests run.
TURN_CORES = min(2, usable_cores())
TURN_WORKERS = 2 * TURN_CORES


@pytest.mark.timeout(120)
def test_a_failing_rank_that_takes_turns_is_named_with_its_process(start_run):
    run = start_run("sync", ["--epochs", "50"], workers=TURN_WORKERS, cores=TURN_CORES,
                    env={"FAULT": "raise", "STEP_DELAY": 0.01})
    run.wait_for_workers()
    pid, fault_at = run.release_fault()
    exited_at = run.finish(timeout=60)

    assert run.proc.returncode == 1, run.stderr
    assert re.search(rf"rank \d+ in the worker process of ranks [\d, -]+ \(pid {pid}\) "
                     rf"raised RuntimeError: injected fault in pid {pid}", run.stderr), run.stderr
    assert "--- traceback of the worker process of ranks" in run.stderr
    assert exited_at - fault_at < EXIT_S
    assert_nothing_left(run)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_hung_rank_that_takes_turns_is_blamed_not_the_ranks_waiting_for_their_turn(
        start_run):
    timeout_s = 3
    run = start_run("sync", ["--epochs", "50", "--worker-timeout", str(timeout_s)],
                    workers=TURN_WORKERS, cores=TURN_CORES,
                    env={"FAULT": "hang", "STEP_DELAY": 0.01})
    run.wait_for_workers()
    pid, fault_at = run.release_fault()
    exited_at = run.finish(timeout=60)

    assert run.proc.returncode == 1, run.stderr
    blamed = re.findall(rf"rank (\d+) in the worker process of ranks [\d, -]+ \(pid {pid}\) "
                        rf"made no progress for {timeout_s} s", run.stderr)
    assert len(blamed) == 1, run.stderr
    assert exited_at - fault_at < timeout_s + EXIT_S
    assert_nothing_left(run)


# -- the parent is stopped or killed ------------------------------------------------------

@pytest.mark.timeout(150)
@pytest.mark.parametrize("signum, target, strategy, sharing", [
    pytest.param(signal.SIGTERM, "parent", "sync", "auto", id="sigterm-parent-sync"),
    pytest.param(signal.SIGINT, "parent", "hogwild", "auto", id="sigint-parent-hogwild",
                 marks=pytest.mark.slow),
    # What Ctrl-C in a terminal does: the whole foreground process group gets SIGINT,
    # torch_shm_manager included.
    pytest.param(signal.SIGINT, "group", "sync", "file_system", id="sigint-group-file_system",
                 marks=pytest.mark.slow),
])
def test_a_stopped_run_exits_at_once_and_resumes_from_its_checkpoint(start_run, tmp_path,
                                                                     signum, target, strategy,
                                                                     sharing):
    out = tmp_path / "out"
    run = start_run(strategy, ["--epochs", "50", "--checkpoint-every", "1", "--out", str(out),
                               "--sharing-strategy", sharing], env={"STEP_DELAY": 0.02})
    run.wait_for_workers()
    assert poll(lambda: (out / "checkpoint.pt").is_file() or run.proc.poll() is not None,
                STARTUP_S) and run.proc.poll() is None, run.stderr
    run.record_tree()
    signalled_at = time.time()
    if target == "group":
        os.killpg(run.proc.pid, signum)
    else:
        os.kill(run.proc.pid, signum)
    exited_at = run.finish(timeout=60)

    assert run.proc.returncode == 128 + signum, run.stderr
    assert exited_at - signalled_at < EXIT_S
    assert f"mptrain run --resume {out}" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    assert_nothing_left(run)

    saved = checkpoints.load(out)
    # A checkpoint the run completed: its own history reaches its epoch, every worker's
    # optimizer and RNG state is in it.
    assert len(saved.metrics) == saved.epoch >= 1
    assert len(saved.ranks) == 2
    assert f"last checkpoint: epoch {saved.epoch} in " in run.stderr, run.stderr
    epochs = saved.epoch + 2
    # The stop message names the user's code to give again: a checkpoint never chooses it.
    assert f"mptrain run --resume {out} --data " in run.stderr, run.stderr
    resumed = start_run(None, ["--resume", str(out), "--epochs", str(epochs)])
    resumed.finish(timeout=90)
    assert resumed.proc.returncode == 0, resumed.stderr
    assert len((out / "metrics.jsonl").read_text().splitlines()) == epochs
    assert (out / "summary.json").is_file() and (out / "model.pt").is_file()
    assert checkpoints.load(out).epoch == epochs


@pytest.mark.timeout(120)
@pytest.mark.parametrize("strategy, sharing", [
    pytest.param("hogwild", "auto", id="hogwild"),
    pytest.param("sync", "file_system", id="sync-file_system", marks=pytest.mark.slow),
])
def test_workers_die_with_their_sigkilled_parent(start_run, strategy, sharing):
    run = start_run(strategy, ["--epochs", "50", "--sharing-strategy", sharing],
                    env={"STEP_DELAY": 0.01})
    workers = run.wait_for_workers()
    assert set(workers) <= set(run.tree)
    killed_at = time.time()
    os.kill(run.proc.pid, signal.SIGKILL)
    run.finish(timeout=10)

    assert run.proc.returncode == -signal.SIGKILL
    gone = poll(lambda: not run.leftovers()[0], EXIT_S)
    assert gone, f"still alive {EXIT_S} s after the parent's SIGKILL: {run.leftovers()[0]}"
    assert time.time() - killed_at < EXIT_S
    assert_nothing_left(run)


# -- restarts -----------------------------------------------------------------------------

# 512 samples, batch 64: 8 batches per epoch, which hogwild's 2 workers take from a queue,
# as many each as their cores allow. A worker's 9th step is past epoch 1 whatever the split,
# and the first worker to take 9 does so within 17 batches, in epoch 2 or 3: the fault comes
# after epoch 1's checkpoint and leaves 3 or more epochs -- 24 batches or more -- for a
# second attempt, whose workers (counting afresh) then reach a 9th step too. The fault waits
# for epoch 1's checkpoint on disk (its gate), which a starved peer may not have reported yet
# when the faulting worker, done with all of epoch 1, starts epoch 2.
RESTART_FAULT = {"FAULT": "raise", "FAULT_STEP": 8}
RESTART_EPOCHS = 5


@pytest.mark.slow
@pytest.mark.timeout(150)
@pytest.mark.parametrize("mode, exit_code", [("once", 0), ("always", 1)])
def test_max_restarts_restarts_once_from_the_last_checkpoint(start_run, tmp_path, mode,
                                                             exit_code):
    out = tmp_path / "out"
    run = start_run("hogwild", ["--epochs", str(RESTART_EPOCHS), "--max-restarts", "1",
                                "--checkpoint-every", "1", "--out", str(out)],
                    env={**RESTART_FAULT, "FAULT_MODE": mode,
                         "FAULT_GATE": out / checkpoints.FILENAME}, quiet=False, gated=False)
    run.finish(timeout=120)
    run.record_tree()  # the workers of both attempts still alive, from their started markers

    assert run.proc.returncode == exit_code, run.stderr
    assert run.stderr.count("restarting") == 1, run.stderr
    # The note names the epoch the restart starts from: the last checkpoint's.
    restart = re.search(r"restarting the workers from epoch (\d+) \(restart 1 of 1\)",
                        run.stderr)
    assert restart and int(restart.group(1)) in (1, 2), run.stderr
    faults = run.markers("fault")
    # Epoch 1 was done before the fault: the second attempt starts after it.
    assert run.stdout.count(f"epoch 1/{RESTART_EPOCHS} ") == 1, run.stdout
    if mode == "once":
        assert len(faults) == 1
        assert "mptrain: error" not in run.stderr
        assert [run.stdout.count(f"epoch {n}/{RESTART_EPOCHS} ")
                for n in range(1, RESTART_EPOCHS + 1)] == [1] * RESTART_EPOCHS, run.stdout
        assert len((out / "metrics.jsonl").read_text().splitlines()) == RESTART_EPOCHS
    else:
        assert len(faults) >= 2  # at least one worker of each attempt
        assert "mptrain: error: training failed: worker rank" in run.stderr
    assert_nothing_left(run)


# -- regressions of bugs found by these tests -------------------------------------------

@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_worker_stuck_in_native_code_dies_on_the_first_sigterm(start_run):
    run = start_run("sync", ["--epochs", "50"], env={"FAULT": "native-hang",
                                                     "STEP_DELAY": 0.01})
    run.wait_for_workers()
    run.release_fault()  # returns once the worker has been asleep in the futex for 0.3 s
    signalled_at = time.time()
    os.kill(run.proc.pid, signal.SIGINT)
    exited_at = run.finish(timeout=60)

    assert run.proc.returncode == 130, run.stderr
    assert_nothing_left(run)
    # The bug: "worker pid N ignored SIGTERM; sending SIGKILL", and the grace period spent.
    assert "ignored SIGTERM" not in run.stderr, run.stderr
    assert exited_at - signalled_at < TERMINATE_GRACE_S
