"""SIGHUP -- the terminal closed, an ssh session dropped -- stops a run as Ctrl-C does.

It reaches the whole process group. Its default action ended the command where it stood, as
a SIGKILL would: no message, exit -1, a checkpoint being written left as a temp file, a gloo
group's rendezvous folder left in the temp folder. Now the command turns it into a stop
(every worker stopped, cleanup done, exit 129) and workers leave it to the parent, as they
leave Ctrl-C.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from run_watch import poll

STARTUP_S = 60.0   # a 2-worker run trains (torch imports on 2 loaded cores)
EXIT_S = 30.0      # SIGHUP -> the command has exited
FACTORY_FILE = Path(__file__).parents[1] / "faulty_workload.py"

COMMAND = textwrap.dedent("""
    import os, signal, threading
    from mptrain.errors import Interrupted
    from mptrain.launch.lifecycle import sigterm_raises
    try:
        with sigterm_raises():
            os.kill(os.getpid(), signal.SIGHUP)
            threading.Event().wait(10)   # bounded: the handler raises here
    except Interrupted as stop:
        print("stopped by", signal.Signals(stop.signum).name)
""")

WORKER = textwrap.dedent("""
    import os, signal
    from mptrain.launch.lifecycle import ignore_interrupts
    ignore_interrupts()
    os.kill(os.getpid(), signal.SIGHUP)
    print("still here")
""")


@pytest.mark.parametrize("script, said", [(COMMAND, "stopped by SIGHUP"),
                                          (WORKER, "still here")], ids=["command", "worker"])
def test_sighup_is_a_stop_for_the_command_and_left_to_the_parent_by_a_worker(script, said):
    # In a child process: before the fix, SIGHUP's default action ends it.
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, said), done.stderr


NOHUP = textwrap.dedent("""
    import os, signal
    from mptrain.launch.lifecycle import sigterm_raises
    signal.signal(signal.SIGHUP, signal.SIG_IGN)   # as nohup starts the command
    with sigterm_raises():
        os.kill(os.getpid(), signal.SIGHUP)
    print("still here")
""")


def test_a_command_started_under_nohup_keeps_ignoring_sighup():
    done = subprocess.run([sys.executable, "-c", NOHUP], capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, "still here"), done.stderr


@pytest.mark.timeout(150)
def test_a_run_whose_terminal_closes_stops_cleanly_and_leaves_nothing(tmp_path):
    factory = tmp_path / "faulty.py"
    factory.write_text(FACTORY_FILE.read_text())
    temp, out = tmp_path / "temp", tmp_path / "out"
    temp.mkdir()
    env = dict(os.environ, FAULT_DIR=str(tmp_path), STEP_DELAY="0.01", TMPDIR=str(temp))
    run = subprocess.Popen(
        [sys.executable, "-m", "mptrain", "run", "--strategy", "ddp", "--ddp-backend", "gloo",
         "--workers", "2", "--epochs", "50", "--checkpoint-every", "1", "--out", str(out),
         "--quiet", "--data", f"{factory}:make_data", "--model", f"{factory}:make_model"],
        cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True)
    tree: dict[int, psutil.Process] = {}
    try:
        assert poll(lambda: (out / "checkpoint.pt").is_file() or run.poll() is not None,
                    STARTUP_S) and run.poll() is None, run.stderr.read()
        for process in psutil.Process(run.pid).children(recursive=True):
            tree[process.pid] = process
        assert list(temp.glob("mptrain-rendezvous-*")), "no gloo rendezvous folder to check"
        os.killpg(run.pid, signal.SIGHUP)   # what a closed terminal sends
        stderr = run.communicate(timeout=EXIT_S)[1]

        assert run.returncode == 128 + signal.SIGHUP, stderr
        assert "stopped by SIGHUP" in stderr and f"mptrain run --resume {out}" in stderr, stderr
        assert "Traceback" not in stderr, stderr
        assert not list(temp.glob("mptrain-*")), sorted(temp.iterdir())
        assert not [path for path in out.iterdir() if path.name.endswith(".tmp")]
        gone = poll(lambda: not any(_alive(process) for process in tree.values()), 5.0)
        assert gone, [pid for pid, process in tree.items() if _alive(process)]
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait(timeout=30)
        for process in tree.values():
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
