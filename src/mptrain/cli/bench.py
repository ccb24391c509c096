"""``mptrain bench``: strategies x worker counts, side by side."""

from __future__ import annotations

import sys
import time

import click

from ..config import DEVICES, OPTIMIZERS, PRECISIONS
from ..errors import UserError
from .app import Choice, cli


@cli.command()
@click.option("--data", default="digits-60k", show_default=True,
              help="Any data set `mptrain run` accepts.")
@click.option("--data-dir", help="Folder with the MNIST IDX files (for --data mnist).")
@click.option("--model", help="Model (default: the data set's own).")
@click.option("--strategies", default="single,hogwild,sync,ddp", show_default=True,
              help="Comma-separated strategies to compare.")
@click.option("--workers", "workers_list", help="Comma-separated worker counts "
                                                "(default: 1, 2 and the usable cores).")
@click.option("--epochs", type=int, default=1, show_default=True,
              help="Work per run: epochs, rounds for fedavg.")
@click.option("--steps", type=int, help="Quick look: only N steps per worker per epoch "
                                        "(not with fedavg, whose unit is a round).")
@click.option("--repeats", type=int, default=3, show_default=True,
              help="Runs per cell, interleaved (A B C A B C).")
@click.option("--threads-per-worker", type=click.IntRange(min=1),
              help="torch threads per worker in every cell (default: usable cores // "
                   "workers).")
@click.option("--time-to-accuracy", type=float,
              help="Also report seconds until test accuracy first reaches this (e.g. 0.97), "
                   "from the evaluation at the end of every epoch or round.")
@click.option("--batch-size", type=click.IntRange(min=1),
              help="Every run's --batch-size (default: the data set's).")
@click.option("--lr", type=click.FloatRange(min=0, min_open=True),
              help="Every run's --lr (default: the data set's).")
@click.option("--optimizer", type=Choice(OPTIMIZERS),
              help="Every run's --optimizer (default: the data set's).")
@click.option("--device", type=Choice(DEVICES),
              help="Where every run trains (cpu; with cuda the cells' workers share the "
                   "visible GPUs as `mptrain run --device cuda` deals them).")
@click.option("--precision", type=Choice(PRECISIONS), help="Every run's --precision.")
@click.option("--clients", type=int, help="fedavg cells: simulated clients (default: the "
                                          "data set's).")
@click.option("--clients-per-round", type=int, help="fedavg cells: clients sampled per round.")
@click.option("--local-epochs", type=int, help="fedavg cells: epochs each client trains.")
@click.option("--partition", help="fedavg cells: iid, dirichlet:ALPHA or shards:K.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=3600,
              show_default=True,
              help="Seconds one run may take.")
@click.option("--memory/--no-memory", default=True, show_default=True,
              help="One more run per cell for peak RSS/PSS of its process tree (sampling "
                   "slows a run, so the timed runs are not sampled).")
@click.option("--out", help="Write bench.json, bench.csv and bench.png here.")
def bench(data, data_dir, model, strategies, workers_list, epochs, steps, repeats,
          threads_per_worker, time_to_accuracy, batch_size, lr, optimizer, device, precision,
          clients, clients_per_round, local_epochs, partition, timeout, memory, out):
    """Compare strategies x worker counts on the same work: time, throughput, speed-up,
    scaling efficiency, accuracy and whole-tree memory.

    Speed-up and efficiency are medians (min-max) of paired ratios: run k of a cell against
    run k of its baseline (repeats are interleaved, so the two ran seconds apart). "!" marks a
    figure whose ratios spread over 20% of their median: too wide to trust. fedavg cells run
    --epochs N as N rounds and are compared with their own 1-thread reference, "fedavg (1
    thread)"; --steps is refused with fedavg."""
    from rich.console import Console

    from ..bench.report import footnotes, render_table, time_lines, write_bench_files
    from ..bench.session import BenchSettings, cpu_steal_s, machine_info, run_bench
    from ..report.outputs import prepare_out_dir

    run_options = []
    for flag, value in (("--batch-size", batch_size), ("--lr", lr), ("--optimizer", optimizer),
                        ("--device", device), ("--precision", precision)):
        if value is not None:
            run_options += [flag, str(value)]
    if device is not None:
        from ..launch.preflight import check_device
        check_device(device)
    threads_per_worker = _threads_up_to_the_cores(threads_per_worker)
    settings = BenchSettings(
        data=data, data_dir=data_dir, model=model,
        strategies=_names(strategies),
        workers=_int_list(workers_list, "--workers"), epochs=epochs, steps=steps,
        repeats=repeats, threads=threads_per_worker, target_accuracy=time_to_accuracy,
        run_options=tuple(run_options), timeout_s=timeout,
        memory=memory, clients=clients, clients_per_round=clients_per_round,
        local_epochs=local_epochs, partition=partition)
    out_dir = prepare_out_dir(out) if out else None
    # A table piped to a file or CI log keeps its columns instead of wrapping at 80.
    console = Console(highlight=False, soft_wrap=True,
                      width=None if sys.stdout.isatty() else 180)
    steal_before, started = cpu_steal_s(), time.monotonic()
    rows, records, _ = run_bench(settings, console)
    wall_s = time.monotonic() - started
    steal_s = cpu_steal_s() - steal_before if steal_before is not None else None
    console.print(render_table(rows, time_to_accuracy))
    machine = machine_info()
    console.print(f"{machine['usable_cores']} usable cores · torch {machine['torch']}"
                  + (" · memory from one more, sampled run per cell" if memory else ""))
    for line in time_lines(rows):
        console.print(line)
    for note in footnotes(rows, repeats=repeats, steal_s=steal_s, wall_s=wall_s,
                          cpus=machine["logical_cpus"] or 1):
        console.print(note)
    if out_dir is not None:
        write_bench_files(out_dir, {**machine, "steal_s": steal_s, "wall_s": wall_s},
                          {k: v for k, v in vars(settings).items()}, rows, records)
        console.print(f"wrote {out_dir}/bench.json bench.csv bench.png")
    if any(row["failed"] for row in rows):
        raise click.exceptions.Exit(1)


def _names(text):
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    if not names:
        raise UserError("--strategies names no strategy; give one or more, e.g. "
                        "--strategies single,ddp")
    return names


def _int_list(text, flag):
    if not text:
        return None
    try:
        counts = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise UserError(f"{flag} takes comma-separated integers, e.g. 1,2,4") from None
    if not counts:
        raise UserError(f"{flag} names no worker count; give one or more, e.g. 1,2,4, or "
                        "leave it out for 1, 2 and the usable cores")
    return counts


def _threads_up_to_the_cores(requested: int | None) -> int | None:
    """``--threads-per-worker`` capped at the usable cores, as every run caps it (each run
    caps it again at its cores over its workers), said in one line: a bench of 64 threads
    on 2 cores would measure time-sharing, not the strategies."""
    from ..launch.tuning import usable_cores

    cores = usable_cores()
    if requested is None or requested <= cores:
        return requested
    click.echo(f"mptrain bench: --threads-per-worker {requested} capped at {cores}, the usable "
               "cores: more threads than cores time-share them, slowing every step", err=True)
    return cores
