"""A stop signal that arrives while the workers are being started stops the run at once.

The bug this guards: the CLI's SIGTERM handler ran inside ``fork()`` (in logging's at-fork
hook, where Python ignores exceptions), so the signal was lost and the parent went on
forking. Here ``mptrain run`` starts many workers on tiny data; the test waits until some of
them exist (a bounded poll, not a sleep), signals, and checks that the run ends with the
signal's exit code within EXIT_S, that start-up was really under way when the signal came,
and that no process and no /dev/shm entry of the run is left.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared helpers
from run_watch import poll, shm_entries  # noqa: E402

WORKERS = 120
SIGNAL_AFTER = 8      # workers started when the signal is sent
STARTUP_S = 60.0      # python + torch import + data on a busy 2-core machine
EXIT_S = 5.0
LEFTOVER_S = 5.0

FACTORY = textwrap.dedent('''
    import torch
    import torch.nn as nn
    from torch.utils.data import TensorDataset


    def make_data():
        generator = torch.Generator().manual_seed(0)
        inputs = torch.randn(4096, 4, generator=generator)
        return TensorDataset(inputs, inputs.sum(dim=1, keepdim=True)), None


    def make_model():
        return nn.Linear(4, 1)
''')


@pytest.mark.timeout(120)
@pytest.mark.parametrize("signum, target", [
    pytest.param(signal.SIGTERM, "parent", id="sigterm-parent"),
    # Ctrl-C in a terminal: the whole process group, workers being started included.
    pytest.param(signal.SIGINT, "group", id="sigint-group", marks=pytest.mark.slow),
])
def test_a_signal_while_workers_start_stops_the_run_and_leaves_nothing(tmp_path, signum,
                                                                       target):
    factory = tmp_path / "tiny.py"
    factory.write_text(FACTORY)
    shm_before = shm_entries()
    with open(tmp_path / "out.txt", "w") as out, open(tmp_path / "err.txt", "w") as err:
        run = subprocess.Popen(
            [sys.executable, "-m", "mptrain", "run", "--data", f"{factory}:make_data",
             # hogwild: a process per worker (sync's ranks would take turns in one
             # process per core, and there would be no long start to interrupt).
             "--model", f"{factory}:make_model", "--strategy", "hogwild", "--workers",
             str(WORKERS), "--epochs", "1", "--batch-size", "8", "--quiet"],
            cwd=tmp_path, stdout=out, stderr=err, start_new_session=True)
    seen: dict[int, psutil.Process] = {}

    def workers_started() -> int:
        try:
            for child in psutil.Process(run.pid).children(recursive=True):
                seen.setdefault(child.pid, child)
            return len(psutil.Process(run.pid).children())
        except psutil.NoSuchProcess:
            return 0

    def stderr() -> str:
        return (tmp_path / "err.txt").read_text()

    try:
        started = poll(lambda: workers_started() >= SIGNAL_AFTER or run.poll() is not None,
                       STARTUP_S)
        assert started and run.poll() is None, f"no workers started:\n{stderr()}"
        at_signal = workers_started()
        signalled_at = time.monotonic()
        if target == "group":
            os.killpg(run.pid, signum)
        else:
            os.kill(run.pid, signum)
        run.wait(timeout=60)
        exited_after = time.monotonic() - signalled_at

        # The signal came while the parent was still starting workers.
        assert at_signal < WORKERS, "every worker had started: the test came too late"
        assert run.returncode == 128 + signum, stderr()
        assert f"stopped by {signal.Signals(signum).name}" in stderr(), stderr()
        assert "Traceback" not in stderr() and "Exception ignored" not in stderr(), stderr()
        assert exited_after < EXIT_S, f"exited {exited_after:.1f} s after the signal"

        def leftovers():
            alive = [pid for pid, process in seen.items() if process.is_running()
                     and process.status() != psutil.STATUS_ZOMBIE]
            return alive, shm_entries() - shm_before

        poll(lambda: not any(leftovers()), LEFTOVER_S)
        alive, new_shm = leftovers()
        assert not alive, f"processes of the run still alive: {alive}"
        assert not new_shm, f"left in /dev/shm: {sorted(new_shm)}"
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait(timeout=30)
