"""One training run, start to end, in the order things happen: plan the layout, check
everything that can be checked before a process starts, say what will happen, train (with
the restart policy of ``launch.restarts``), write the outputs. Each step is someone else's
job; this module only puts them in order. ``fit()`` (and so the CLI) ends up here."""

from __future__ import annotations

import time
from pathlib import Path

import torch.nn as nn

from .checkpoint import Checkpoint, CheckpointKeeper, check_resumable
from .config import TrainConfig
from .data.sources import DataBundle
from .launch import launcher, warmup
from .launch.execute import Job
from .launch.layout import plan_layout, preflight
from .launch.restarts import train_with_restarts
from .launch.world import detect_external_world
from .report import plots
from .report.console import ConsolePresenter
from .report.metrics import EpochMetrics
from .report.outputs import prepare_out_dir
from .report.recorder import RunRecorder
from .report.summary import banner_lines, build_summary, result_lines, write_outputs
from .result import FitResult
from .strategies import make_strategy


def run_training(config: TrainConfig, bundle: DataBundle, model: nn.Module, model_name: str,
                 presenter: ConsolePresenter | None = None, out: str | Path | None = None,
                 resume: Checkpoint | None = None,
                 run_info: dict | None = None) -> FitResult:
    started = time.monotonic()
    world = detect_external_world()
    given_out = out
    if world is not None and world.rank != 0:
        presenter, out = presenter_for_rank(world), None  # rank 0 speaks and writes
    presenter = presenter or ConsolePresenter(quiet=config.quiet)
    strategy = make_strategy(config)
    layout = plan_layout(config, strategy, world)
    run_info = dict(run_info or {})
    elastic, notes = False, []
    if world is not None:
        # The group exists before anything else: resuming needs it after a restart.
        attempt = launcher.join(world, "nccl" if layout.comm == "nccl" else "gloo",
                                config.worker_timeout)
        run_info[launcher.RUN_ID_KEY] = launcher.run_id()
        elastic = launcher.may_restart()
        if resume is None:
            resume = launcher.elastic_resume(given_out, config, world, attempt)
            if resume is not None:
                notes.append(f"torchrun restarted the job: resuming after {config.unit} "
                             f"{resume.epoch} from the checkpoint in {given_out}")
    check_resumable(resume, config, layout.workers)
    machine_warnings = preflight(config, bundle, model, strategy, layout)
    if elastic and given_out is None:
        notes.append("torchrun may restart this job (--max-restarts) but without --out "
                     "no checkpoint is written: a restart starts from the beginning")
    out_dir = prepare_out_dir(out) if out is not None else None  # after every refusal
    keeper = CheckpointKeeper(config, run_info, out_dir, resume, keep_on_disk=elastic)
    if resume is not None:
        model.load_state_dict(resume.model)
    presenter.banner(banner_lines(config, bundle, model, model_name, layout)
                     + strategy.describe(layout))
    for note in notes:
        presenter.note(note)
    for warning in machine_warnings:
        presenter.machine_note(warning)

    result = FitResult(model=model, config=config)
    if resume is not None:
        result.epochs = [EpochMetrics.from_dict(row) for row in resume.metrics]
    recorder = RunRecorder(config, strategy, bundle.task, presenter, keeper, out_dir,
                           layout.workers, strategy.samples_per_round(bundle, layout.workers),
                           started, result.epochs)
    result.restarts = train_with_restarts(
        Job(config=config, bundle=bundle, model=model, strategy=strategy, layout=layout,
            presenter=presenter, on_report=recorder.on_report,
            checkpoint_every=keeper.every,
            while_workers_train=_import_plotting if out_dir is not None else None),
        keeper, recorder, world)
    warmup.wait_for_imports()  # the plotting import, before the plot

    wall_s = time.monotonic() - started
    first = recorder.first_step_at
    result.summary = build_summary(config, bundle, model, model_name, layout, result.epochs,
                                   wall_s, first - started if first else None)
    result.summary["restarts"] = result.restarts
    if out_dir is not None:
        write_outputs(out_dir, result)
    presenter.result(result_lines(result.summary, out_dir))
    return result


def _import_plotting() -> None:
    warmup.import_in_background(plots.MODULES)


def presenter_for_rank(world) -> ConsolePresenter:
    """What a rank other than 0 of a torchrun job prints: rank 0 shows the run, and each other
    node's first rank the notes about its own machine, on that node's terminal -- a warning
    can concern one node alone (its cores, its memory), and node 0 never sees node 1's."""
    if world.local_rank != 0:
        return ConsolePresenter(silent=True)
    return ConsolePresenter(other_node=f"node {world.node} (rank {world.rank})")
