"""Command line: parse flags, merge them over the config file, hand over, present errors.

No training logic lives here. Every user mistake becomes one line on stderr and exit code 2.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import click

from .config import OPTIMIZERS, STRATEGIES, TrainConfig, load_config_file
from .errors import Interrupted, RunInterrupted, UserError, WorkerFailedError
from .launch.lifecycle import exit_after_cleanup, leave
from .launch.world import detect_external_world

RUN_FLAGS = ("data", "data_dir", "model", "out")
# click >= 8.2 raises this for a bare `mptrain`; older versions print the help themselves.
_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="mptrain")
def cli():
    """Train PyTorch models with several processes on one machine."""


@cli.command()
@click.option("--data", help="digits (default), linreg, mnist, or module:factory.")
@click.option("--data-dir", help="Folder with the MNIST IDX files (for --data mnist).")
@click.option("--model", help="digits-cnn, mnist-cnn, linear, mlp, or module:factory "
                              "(default: the data set's own).")
@click.option("--strategy", type=click.Choice(STRATEGIES), help="How work is split (single).")
@click.option("--workers", type=int, help="Worker processes (default 2 for parallel strategies).")
@click.option("--epochs", type=int, help="Passes over the training set.")
@click.option("--batch-size", type=int, help="Samples per step and worker.")
@click.option("--lr", type=float, help="Learning rate.")
@click.option("--momentum", type=float, help="SGD momentum (Adam: beta1).")
@click.option("--optimizer", type=click.Choice(OPTIMIZERS), help="sgd or adam.")
@click.option("--lr-decay", type=float,
              help="Multiply the learning rate by this after every epoch (1: constant).")
@click.option("--lr-schedule", type=click.Choice(("step", "cosine")),
              help="step: constant within an epoch; cosine: annealed to 0 within each epoch.")
@click.option("--weight-decay", type=float, help="L2 penalty (default 0).")
@click.option("--seed", type=int, help="Seed for initialisation and shuffling (default 0).")
@click.option("--threads-per-worker", type=int,
              help="torch threads per worker (default: usable cores // workers).")
@click.option("--sync-every", type=int, help="sync: average parameters every N steps "
                                             "(default: the data set's, else once per epoch).")
@click.option("--share-optimizer-state/--no-share-optimizer-state", default=None,
              help="hogwild: one optimizer state in shared memory for all workers.")
@click.option("--ddp-backend", type=click.Choice(("auto", "shm", "gloo", "nccl")),
              help="ddp: how gradients are averaged (auto: shared memory on one CPU machine).")
@click.option("--device", type=click.Choice(("cpu", "cuda")), help="Where to train (cpu).")
@click.option("--start-method", type=click.Choice(("fork", "spawn", "forkserver")),
              help="Override the automatic choice (fork on CPU/Linux, spawn with CUDA).")
@click.option("--steps-per-epoch", type=int,
              help="Cut every epoch after N steps per worker (quick looks).")
@click.option("--worker-timeout", type=float,
              help="Seconds without progress before a worker counts as hung (300).")
@click.option("--sharing-strategy", type=click.Choice(("auto", "file_descriptor", "file_system")),
              help="How tensors are shared between processes (auto: from the open-file "
                   "limit).")
@click.option("--checkpoint-every", type=int,
              help="Write an atomic checkpoint to --out every N epochs (and at the end).")
@click.option("--resume", type=click.Path(),
              help="Continue the run whose --out folder (or checkpoint file) this is.")
@click.option("--max-restarts", type=int,
              help="Restart failed workers from the last checkpoint up to N times (0).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False),
              help="TOML file with any of these options; flags override it.")
@click.option("--out", help="Write summary.json, metrics.jsonl, model.pt, curves.png here.")
@click.option("--quiet", "-q", is_flag=True, default=None, help="Print nothing but errors.")
def run(config_file, resume, **flags):
    """Train a model; with no options, a CNN on the embedded handwritten digits."""
    from .api import train_bundle
    from .checkpoint import load as load_checkpoint
    from .launch import warmup

    warmup.start_in_background()
    from .data.sources import load_data
    from .models import build_model

    checkpoint = load_checkpoint(resume) if resume else None
    # Precedence: checkpoint < config file < flags (the data set's defaults fill the rest).
    settings = _resumed_settings(checkpoint, resume) if checkpoint else {}
    settings.update(load_config_file(config_file) if config_file else {})
    settings.update({k: v for k, v in flags.items() if v is not None})
    locations = {k: settings.pop(k, None) for k in RUN_FLAGS}
    config = TrainConfig(**settings)
    bundle = load_data(locations["data"] or "digits", locations["data_dir"])
    model_name = locations["model"] or bundle.default_model
    model = build_model(model_name, bundle.input_shape, bundle.output_size, config.seed)
    run_info = {"data": bundle.name if locations["data"] is None else locations["data"],
                "data_dir": locations["data_dir"], "model": model_name}
    train_bundle(config, bundle, model, model_name, out=locations["out"], resume=checkpoint,
                 run_info=run_info)
    if detect_external_world() is not None:
        # gloo's teardown aborts now and then after the work is done; torchrun would
        # report that finished rank as failed.
        leave(0)


def _resumed_settings(checkpoint, resume_path) -> dict:
    settings = {k: v for k, v in checkpoint.config.items()
                if k not in ("extra", "quiet") and v is not None}
    settings.update({k: v for k, v in checkpoint.run.items() if v is not None})
    if "data_dir" in settings and settings.get("data") != "mnist":
        settings.pop("data_dir")
    settings["out"] = str(resume_path if Path(resume_path).is_dir()
                          else Path(resume_path).parent)
    return settings


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def devices(as_json):
    """CPUs, memory, /dev/shm, open-file limit, torch, start methods, CUDA devices."""
    from rich.console import Console

    from .devices import collect_device_report, format_device_report

    report = collect_device_report()
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        Console().print(format_device_report(report))


@cli.command()
@click.option("--clean", is_flag=True,
              help="Remove shared-memory segments left by dead runs (never live ones).")
def doctor(clean):
    """Check /dev/shm, open-file limit, start methods, CUDA and leftover segments."""
    from rich.console import Console

    from .doctor import clean_leftovers, find_leftovers, run_checks

    console = Console(highlight=False, soft_wrap=True)
    marks = {"ok": "[green]ok  [/green]", "warn": "[yellow]warn[/yellow]",
             "fail": "[red]FAIL[/red]"}
    checks = run_checks()
    for check in checks:
        console.print(f"{marks[check.status]} {check.name}: {check.detail}")
        if check.advice:
            console.print(f"     -> {check.advice}")
    if clean:
        removed, freed = clean_leftovers(find_leftovers())
        console.print(f"removed {removed} leftover segment(s), {freed / 2**20:.1f} MiB freed")
    if any(check.status == "fail" for check in checks):
        raise click.exceptions.Exit(1)


@cli.command()
@click.option("--data", default="digits-60k", show_default=True,
              help="Any data set `mptrain run` accepts.")
@click.option("--data-dir", help="Folder with the MNIST IDX files (for --data mnist).")
@click.option("--model", help="Model (default: the data set's own).")
@click.option("--strategies", default="single,hogwild,sync,ddp", show_default=True,
              help="Comma-separated strategies to compare.")
@click.option("--workers", "workers_list", help="Comma-separated worker counts "
                                                "(default: 1, 2 and the usable cores).")
@click.option("--epochs", type=int, default=1, show_default=True, help="Work per run.")
@click.option("--steps", type=int, help="Quick look: only N steps per worker per epoch.")
@click.option("--repeats", type=int, default=3, show_default=True,
              help="Runs per cell, interleaved (A B C A B C).")
@click.option("--threads-per-worker", type=int, help="Default: usable cores // workers.")
@click.option("--time-to-accuracy", type=float,
              help="Also report seconds until test accuracy first reaches this (e.g. 0.97).")
@click.option("--eval-every", type=int, help="With --time-to-accuracy: evaluate every N "
                                             "steps per worker instead of every epoch.")
@click.option("--batch-size", type=int)
@click.option("--lr", type=float)
@click.option("--optimizer", type=click.Choice(OPTIMIZERS))
@click.option("--timeout", type=float, default=3600, show_default=True,
              help="Seconds one run may take.")
@click.option("--memory/--no-memory", default=True, show_default=True,
              help="One more run per cell for peak RSS/PSS of its process tree (sampling "
                   "slows a run, so the timed runs are not sampled).")
@click.option("--out", help="Write bench.json, bench.csv and bench.png here.")
def bench(data, data_dir, model, strategies, workers_list, epochs, steps, repeats,
          threads_per_worker, time_to_accuracy, eval_every, batch_size, lr, optimizer,
          timeout, memory, out):
    """Compare strategies x worker counts on the same work: time, throughput, speed-up,
    scaling efficiency, accuracy and whole-tree memory."""
    from rich.console import Console

    from .bench.report import render_table, write_bench_files
    from .bench.session import BenchSettings, machine_info, run_bench
    from .report.outputs import prepare_out_dir

    run_options = []
    for flag, value in (("--batch-size", batch_size), ("--lr", lr), ("--optimizer", optimizer)):
        if value is not None:
            run_options += [flag, str(value)]
    settings = BenchSettings(
        data=data, data_dir=data_dir, model=model,
        strategies=tuple(s.strip() for s in strategies.split(",") if s.strip()),
        workers=_int_list(workers_list, "--workers"), epochs=epochs, steps=steps,
        repeats=repeats, threads=threads_per_worker, target_accuracy=time_to_accuracy,
        eval_every=eval_every, run_options=tuple(run_options), timeout_s=timeout,
        memory=memory)
    out_dir = prepare_out_dir(out) if out else None
    # A table piped to a file or CI log keeps its columns instead of wrapping at 80.
    console = Console(highlight=False, soft_wrap=True,
                      width=None if sys.stdout.isatty() else 180)
    rows, records, _ = run_bench(settings, console)
    console.print(render_table(rows, time_to_accuracy))
    machine = machine_info()
    console.print(f"{machine['usable_cores']} usable cores · torch {machine['torch']} · "
                  "efficiency = samples/s / (workers x single-thread samples/s) · "
                  "speedup is over single with its default threads"
                  + (" · memory from one more, sampled run per cell" if memory else ""))
    if out_dir is not None:
        write_bench_files(out_dir, machine, {k: v for k, v in vars(settings).items()}, rows,
                          records)
        console.print(f"wrote {out_dir}/bench.json bench.csv bench.png")
    if any(row["failed"] for row in rows):
        raise click.exceptions.Exit(1)


def _int_list(text, flag):
    if not text:
        return None
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise UserError(f"{flag} takes comma-separated integers, e.g. 1,2,4") from None


def main(argv=None) -> int:
    previous = signal.signal(signal.SIGTERM, _raise_interrupted)
    try:
        cli.main(args=argv, prog_name="mptrain", standalone_mode=False)
    except _NO_ARGS_IS_HELP as err:
        click.echo(err.ctx.get_help() if err.ctx else "usage: mptrain COMMAND --help")
        return 0
    except click.exceptions.UsageError as err:
        hint = f" (see: mptrain {err.ctx.info_name if err.ctx else ''} --help)".replace(
            "mptrain mptrain", "mptrain")
        _fail(err.format_message() + hint, 2)
    except click.exceptions.Abort:
        _fail("interrupted", 130)
    except UserError as err:
        _fail(str(err), err.exit_code)
    except WorkerFailedError as err:
        _fail(str(err), err.exit_code)
    except RunInterrupted as err:
        click.echo(f"mptrain: {err}", err=True)
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        _fail("interrupted; every worker was stopped", 130)
    except Interrupted as stop:
        _fail(f"stopped by signal {stop.signum}; every worker was stopped", 128 + stop.signum)
    except click.exceptions.Exit as done:
        return done.exit_code
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0


def console() -> None:
    """The ``mptrain`` command: ``main`` then a quick exit (``main`` itself returns, so tests
    and embedding code can call it)."""
    try:
        code = main()
    except SystemExit as done:
        code = done.code
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    exit_after_cleanup(code)


def _raise_interrupted(signum, frame):
    raise Interrupted(signum)


def _fail(message: str, code: int):
    click.echo(f"mptrain: error: {message}", err=True)
    sys.exit(code)
