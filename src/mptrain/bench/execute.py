"""Run one bench cell: ``mptrain run`` in a fresh process (so start-up is measured honestly),
either timed, or with its whole process tree sampled for memory.

The two are separate runs: reading a tree's PSS walks the page tables of every process and
holds their memory locks; at 2 Hz it cost a 2-worker MNIST run 10-20% of its samples/s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..launch.lifecycle import dies_with_this_process
from ..leftovers import BENCH_PREFIX
from .matrix import Cell, one_worker
from .memory import TreeMemorySampler
from .stats import time_to_accuracy


@dataclass
class Workload:
    """What every cell trains: the ``mptrain run`` options shared by all cells."""

    run_options: list[str]
    epochs: int                         # epochs per run; rounds for fedavg cells
    steps_per_epoch: int | None = None
    target_accuracy: float | None = None
    timeout_s: float = 3600.0
    round_options: list[str] = field(default_factory=list)  # --clients ...: fedavg cells only


@dataclass
class RunRecord:
    cell: Cell
    repeat: int
    ok: bool
    error: str | None = None
    wall_s: float | None = None
    startup_s: float | None = None
    epoch_s: float | None = None
    samples_per_s: float | None = None
    test_accuracy: float | None = None
    test_loss: float | None = None
    final_train_loss: float | None = None
    time_to_accuracy_s: float | None = None
    peak_rss_bytes: int | None = None
    peak_pss_bytes: int | None = None
    start_method: str | None = None   # what the run used (summary.json); None: no workers
    time_shares: dict | None = None   # where the ranks' step time went (engine.profile)
    client_path: str | None = None    # fedavg: how its clients trained (summary.json)
    memory_sampled: bool = False   # a memory run: its times are not reported
    epochs: list = field(default_factory=list)


def command_for(cell: Cell, workload: Workload, out: Path) -> list[str]:
    unit = "--rounds" if cell.unit == "round" else "--epochs"
    command = [sys.executable, "-m", "mptrain", "run", *workload.run_options,
               "--strategy", cell.strategy, unit, str(workload.epochs),
               "--quiet", "--out", str(out)]
    if not one_worker(cell.strategy):
        command += ["--workers", str(cell.workers)]
    if cell.threads is not None:
        command += ["--threads-per-worker", str(cell.threads)]
    if cell.unit == "round":
        command += workload.round_options
    elif workload.steps_per_epoch is not None:
        # A round has no steps per epoch to cut; the bench refuses --steps with fedavg.
        command += ["--steps-per-epoch", str(workload.steps_per_epoch)]
    return command


def run_cell(cell: Cell, repeat: int, workload: Workload, sample_memory: bool = False
             ) -> RunRecord:
    # Named after this process: what a SIGKILLed bench leaves, mptrain doctor --clean finds.
    with tempfile.TemporaryDirectory(prefix=f"{BENCH_PREFIX}{os.getpid()}-") as folder:
        out = Path(folder) / "run"
        started = time.monotonic()
        # A SIGKILLed bench would otherwise leave the run training on, an orphan.
        process = subprocess.Popen(command_for(cell, workload, out), stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True,
                                   preexec_fn=dies_with_this_process())
        sampler = TreeMemorySampler(process.pid, interval_s=0.2) if sample_memory else None
        if sampler is not None:
            sampler.start()
        try:
            output, _ = process.communicate(timeout=workload.timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            output, _ = process.communicate()
            output += f"\n(no result within {workload.timeout_s:.0f} s)"
        except BaseException:
            # Ctrl-C / SIGTERM of the bench: stop the run (it stops its own workers) first.
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            raise
        finally:
            if sampler is not None:
                sampler.stop()
        wall_s = time.monotonic() - started
        summary_path = out / "summary.json"
        if process.returncode != 0 or not summary_path.is_file():
            lines = [line for line in output.strip().splitlines() if line.strip()]
            return RunRecord(cell, repeat, ok=False, wall_s=wall_s, memory_sampled=sample_memory,
                             error=lines[-1] if lines else f"exit code {process.returncode}")
        summary = json.loads(summary_path.read_text())
        epochs = [json.loads(line) for line in
                  (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return record_from(cell, repeat, summary, epochs, wall_s, sampler, workload)


def record_from(cell, repeat, summary, epochs, wall_s, sampler, workload) -> RunRecord:
    startup = summary.get("process_start_to_first_step_s")
    offset = (startup - summary["startup_s"]) if startup is not None and \
        summary.get("startup_s") is not None else 0.0
    epoch_times = sorted(row["epoch_s"] for row in epochs)
    return RunRecord(
        cell, repeat, ok=True, wall_s=wall_s, startup_s=startup,
        epoch_s=epoch_times[len(epoch_times) // 2] if epoch_times else None,
        samples_per_s=summary.get("train_samples_per_s"),
        test_accuracy=summary.get("test_accuracy"), test_loss=summary.get("test_loss"),
        final_train_loss=summary.get("final_train_loss"),
        time_to_accuracy_s=(time_to_accuracy(epochs, workload.target_accuracy, offset)
                            if workload.target_accuracy is not None else None),
        peak_rss_bytes=(sampler.peak_rss or None) if sampler else None,
        peak_pss_bytes=(sampler.peak_pss or None) if sampler else None,
        start_method=summary.get("start_method"), time_shares=summary.get("time_shares"),
        client_path=summary.get("client_path"), memory_sampled=sampler is not None, epochs=epochs)
