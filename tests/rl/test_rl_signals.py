"""Ctrl-C during an RL run stops every actor, says how to resume, and leaves nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

pytest.importorskip("gymnasium")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared helpers
from run_watch import poll, shm_entries  # noqa: E402

STARTUP_S = 60.0
EXIT_S = 10.0


@pytest.mark.timeout(120)
@pytest.mark.parametrize("algo_flags", [
    ["--algo", "dqn", "--learning-starts", "100", "--buffer-size", "2000"],
    ["--algo", "ppo", "--envs-per-actor", "2"],   # a learner waits at a barrier between
])
def test_ctrl_c_stops_every_actor_after_a_checkpoint(tmp_path, algo_flags):
    shm_before = shm_entries()
    out = tmp_path / "run"
    process = subprocess.Popen(
        [sys.executable, "-m", "mptrain", "rl", *algo_flags, "--workers", "2",
         "--steps", "10000000", "--round-steps", "1000",
         "--checkpoint-every", "1", "--out", str(out), "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        # Wait (bounded) for a checkpoint: the actors are running then.
        assert poll(lambda: (out / "checkpoint.pt").exists(), STARTUP_S), "no checkpoint"
        actors = psutil.Process(process.pid).children(recursive=True)
        assert len(actors) == 2
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=EXIT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 128 + signal.SIGINT
    assert "stopped by SIGINT" in err and f"mptrain rl --resume {out}" in err
    assert poll(lambda: not any(a.is_running() and a.status() != psutil.STATUS_ZOMBIE
                                for a in actors), EXIT_S)
    pids = [str(process.pid)] + [str(a.pid) for a in actors]

    def ours_left():  # only this run's entries: other runs may share the machine
        return [name for name in shm_entries() - shm_before if any(p in name for p in pids)]

    assert poll(lambda: not ours_left(), EXIT_S), ours_left()
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert rows and rows[-1]["env_steps"] >= 1000
