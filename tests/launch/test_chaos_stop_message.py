"""A run stopped before its first checkpoint says so, instead of asking for the flags it was
given: "no checkpoint was written (use --out DIR --checkpoint-every 1 to be able to resume)"
was the answer to a Ctrl-C in epoch 2 of a run with --out and --checkpoint-every 5, or one
that fell while the first checkpoint was being written."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from run_watch import poll

STARTUP_S = 60.0
FACTORY_FILE = Path(__file__).parents[1] / "faulty_workload.py"


@pytest.mark.timeout(150)
def test_a_run_stopped_before_its_first_checkpoint_names_when_that_would_have_come(tmp_path):
    factory = tmp_path / "faulty.py"
    factory.write_text(FACTORY_FILE.read_text())
    out = tmp_path / "out"
    run = subprocess.Popen(
        [sys.executable, "-m", "mptrain", "run", "--strategy", "sync", "--workers", "2",
         "--epochs", "50", "--checkpoint-every", "40", "--out", str(out), "--quiet",
         "--data", f"{factory}:make_data", "--model", f"{factory}:make_model"],
        cwd=tmp_path, env=dict(os.environ, FAULT_DIR=str(tmp_path), STEP_DELAY="0.01"),
        stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        metrics = out / "metrics.jsonl"
        assert poll(lambda: (metrics.is_file() and metrics.read_text().strip())
                    or run.poll() is not None, STARTUP_S) and run.poll() is None
        os.kill(run.pid, signal.SIGINT)
        stderr = run.communicate(timeout=60)[1]
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait(timeout=30)

    assert run.returncode == 130, stderr
    assert "no checkpoint was complete yet (the first comes after epoch 40)" in stderr, stderr
    assert "--checkpoint-every 1 to be able to resume" not in stderr, stderr
