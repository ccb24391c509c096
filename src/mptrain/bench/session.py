"""A whole bench: validate the workload, warm up, run the interleaved matrix, summarise."""

from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass, replace

import psutil
import torch
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from ..strategies.registry import STRATEGIES
from ..data.sources import load_data
from ..errors import UserError, brief
from ..launch.preflight import no_test_accuracy
from ..launch.tuning import usable_cores
from .execute import RunRecord, Workload, run_cell
from .matrix import REFERENCE, Cell, counts_rounds, expand, interleave, memory_pass, worker_counts
from .report import cell_rows

# Bench flags passed to fedavg cells only, as the `mptrain run` flags of the same name.
ROUND_FLAGS = {"clients": "--clients", "clients_per_round": "--clients-per-round",
               "local_epochs": "--local-epochs", "partition": "--partition"}


@dataclass(frozen=True)
class BenchSettings:
    data: str
    data_dir: str | None
    model: str | None
    strategies: tuple[str, ...]
    workers: tuple[int, ...] | None
    epochs: int
    steps: int | None
    repeats: int
    threads: int | None
    target_accuracy: float | None
    run_options: tuple[str, ...]   # further `mptrain run` flags: batch size, lr, ...
    timeout_s: float = 3600.0
    memory: bool = True            # one extra run per cell, sampled for peak RSS/PSS
    # fedavg cells only; None: the data set's default
    clients: int | None = None
    clients_per_round: int | None = None
    local_epochs: int | None = None
    partition: str | None = None

    def __post_init__(self):
        unknown = [s for s in self.strategies if s not in STRATEGIES]
        if unknown:
            raise UserError(f"--strategies: unknown {', '.join(unknown)}; choose from "
                            f"{', '.join(STRATEGIES)}")
        for name in ("epochs", "repeats"):
            if getattr(self, name) < 1:
                raise UserError(f"--{name} must be a positive integer")
        for name in ("steps", "clients", "clients_per_round", "local_epochs"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise UserError(f"--{name.replace('_', '-')} must be a positive integer")
        rounds = [s for s in self.strategies if counts_rounds(s)]
        given = [ROUND_FLAGS[name] for name in ROUND_FLAGS if getattr(self, name) is not None]
        if given and not rounds:
            raise UserError(f"{', '.join(given)} applies to fedavg cells only; add fedavg to "
                            "--strategies or drop it")
        if rounds and self.steps is not None:
            raise UserError(f"--steps cannot be used with {rounds[0]}, whose unit of work "
                            "is a round: set rounds with --epochs and size them with "
                            "--clients-per-round and --local-epochs")
        if self.partition is not None:
            from ..data.partitions import parse_partition
            parse_partition(self.partition)   # a typo fails now, not in every fedavg cell
        if None not in (self.clients, self.clients_per_round) and \
                self.clients_per_round > self.clients:
            raise UserError(f"--clients-per-round {self.clients_per_round} is more than "
                            f"--clients {self.clients}; sample at most every client a round")
        if self.workers is not None and any(w < 1 for w in self.workers):
            raise UserError("--workers takes positive integers, e.g. --workers 1,2,4")
        if self.target_accuracy is not None and not 0 < self.target_accuracy <= 1:
            raise UserError("--time-to-accuracy takes a fraction in (0, 1], e.g. 0.97")


def plan(settings: BenchSettings) -> tuple[list[Cell], Workload]:
    """Check the workload in this process (a mistake fails now, not in every cell)."""
    bundle = load_data(settings.data, settings.data_dir)  # a bad --data fails here, in one line
    check_time_to_accuracy(settings.target_accuracy, bundle)
    options = ["--data", settings.data, *(["--data-dir", settings.data_dir]
                                          if settings.data_dir else []),
               *(["--model", settings.model] if settings.model else []),
               *settings.run_options]
    epochs, steps = settings.epochs, settings.steps
    cells = expand(list(settings.strategies),
                   worker_counts(list(settings.workers or []), usable_cores()),
                   settings.threads)
    round_options = [option for name, flag in ROUND_FLAGS.items()
                     if getattr(settings, name) is not None
                     for option in (flag, str(getattr(settings, name)))]
    return cells, Workload(run_options=options, epochs=epochs, steps_per_epoch=steps,
                           target_accuracy=settings.target_accuracy,
                           timeout_s=settings.timeout_s, round_options=round_options)


def check_time_to_accuracy(target: float | None, bundle) -> None:
    """Seconds to an accuracy need a test accuracy, or every cell reported no figure
    without a word."""
    why = no_test_accuracy(bundle) if target is not None else None
    if why is not None:
        raise UserError(f"--time-to-accuracy times the runs to a test accuracy, but {why}; "
                        "leave --time-to-accuracy out")


def run_bench(settings: BenchSettings, console: Console | None = None
              ) -> tuple[list[dict], list[RunRecord], list[Cell]]:
    cells, workload = plan(settings)
    schedule = [(repeat, cell, False) for repeat, cell in interleave(cells, settings.repeats)]
    if settings.memory:
        schedule += [(repeat, cell, True) for repeat, cell in memory_pass(cells, settings.repeats)]
    records: list[RunRecord] = []
    # A log or a pipe gets no progress bar (rich shows none there, and it would be minutes of
    # silence): a line per finished run instead.
    console = console or Console()
    lines = not console.is_terminal
    with Progress(TextColumn("{task.description}"), BarColumn(),
                  TextColumn("{task.completed}/{task.total} runs"), TimeElapsedColumn(),
                  TextColumn("left"), TimeRemainingColumn(), console=console,
                  # rich's default 10 Hz redraw took 3-6% of a core from the runs measured
                  transient=True, refresh_per_second=2, disable=lines) as progress:
        task = progress.add_task("warm-up", total=len(schedule) + 1)
        # One untimed run first: file caches, bytecode, the allocator of a cold machine.
        warm = run_cell(Cell(REFERENCE, 1, threads=1, reference=True), -1,
                        replace(workload, epochs=1, steps_per_epoch=5, target_accuracy=None))
        if not warm.ok:   # it ran with every cell's run options: each would fail the same
            reason = (warm.error or "no reason given").removeprefix("mptrain: error: ")
            raise UserError(f"the warm-up run ({REFERENCE}, 1 thread) failed, and every "
                            f"cell would: {reason}")
        progress.advance(task)
        for repeat, cell, sample_memory in schedule:
            step = "memory" if sample_memory else f"repeat {repeat + 1}/{settings.repeats}"
            progress.update(task, description=f"{cell.label:<20} {step}")
            records.append(run_cell(cell, repeat, workload, sample_memory))
            progress.advance(task)
            if lines:
                console.print(finished_line(len(records), len(schedule), step,
                                            records[-1]), highlight=False)
    return cell_rows(cells, records), records, cells


def finished_line(done: int, total: int, step: str, record: RunRecord) -> str:
    """``3/13 sync x2 repeat 1/3: 12.3 s, 4,512 samples/s``: one run's end, for a log."""
    head = f"{done}/{total} {record.cell.label} {step}: "
    if not record.ok:
        return head + f"failed: {brief(record.error or '') or 'no reason given'}"
    if record.memory_sampled:
        peak = record.peak_pss_bytes or record.peak_rss_bytes
        return head + (f"peak memory {peak / 2**20:,.0f} MiB" if peak else "memory sampled")
    figures = [f"{record.wall_s:.1f} s" if record.wall_s is not None else None,
               f"{record.samples_per_s:,.0f} samples/s" if record.samples_per_s else None]
    return head + ", ".join(f for f in figures if f)


def cpu_steal_s() -> float | None:
    """CPU seconds the hypervisor has given other guests since boot, over every CPU (None
    where the platform does not count them)."""
    return getattr(psutil.cpu_times(), "steal", None)


def machine_info() -> dict:
    """The machine. The start method is not here: each run records the one it used (runs and
    cells of bench.json)."""
    return {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "torch": torch.__version__,
            "python": platform.python_version(), "platform": platform.platform(),
            "usable_cores": usable_cores(), "logical_cpus": os.cpu_count(),
            "memory_bytes": psutil.virtual_memory().total,
            "default_threads_per_worker": "usable cores // workers"}
