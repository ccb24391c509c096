"""Run one training job: decide its layout, train (in this process, on supervised workers, or
as a torchrun rank), collect per-epoch metrics, keep checkpoints, restart failed workers,
stop cleanly on Ctrl-C, write outputs. ``fit()`` and the CLI both end up here."""

from __future__ import annotations

import copy
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch.nn as nn

from . import checkpoint as checkpoints
from .config import TrainConfig
from .data.sources import DataBundle
from .errors import Interrupted, RunInterrupted, UserError, WorkerFailedError
from .launch.execute import (Job, samples_per_epoch, train_in_process, train_on_workers,
                             train_under_launcher)
from .launch.layout import choose_sharing, plan_layout
from .launch.preflight import check_device, check_model_fits_data, check_workload
from .launch.tuning import usable_cores
from .launch.world import detect_external_world
from .report.console import ConsolePresenter
from .report.metrics import EpochCollector, EpochMetrics
from .report.outputs import write_jsonl
from .report.summary import banner_lines, build_summary, result_lines, write_outputs
from .strategies import make_strategy


@dataclass
class FitResult:
    """What a run produced: the trained model, per-epoch metrics and the summary."""

    model: nn.Module
    config: TrainConfig
    epochs: list[EpochMetrics] = field(default_factory=list)
    summary: dict = field(default_factory=dict)
    restarts: int = 0

    @property
    def test_accuracy(self) -> float | None:
        return self.summary.get("test_accuracy")

    @property
    def test_mse(self) -> float | None:
        return self.summary.get("test_mse")


def run_training(config: TrainConfig, bundle: DataBundle, model: nn.Module, model_name: str,
                 presenter: ConsolePresenter | None = None, out_dir: Path | None = None,
                 resume: checkpoints.Checkpoint | None = None,
                 run_info: dict | None = None) -> FitResult:
    started = time.monotonic()
    world = detect_external_world()
    if world is not None and world.rank != 0:
        presenter, out_dir = ConsolePresenter(quiet=True), None  # rank 0 speaks and writes
    presenter = presenter or ConsolePresenter(quiet=config.quiet)
    strategy = make_strategy(config)
    layout = plan_layout(config, strategy, world)
    check_device(config)
    check_model_fits_data(model, bundle)
    warnings = check_workload(config, bundle, layout.workers, usable_cores())
    if layout.start_method is not None:
        choose_sharing(config, layout, bundle, model, strategy)
    if resume is not None:
        _check_resumable(resume, config, layout.workers)
        model.load_state_dict(resume.model)
    presenter.banner(banner_lines(config, bundle, model, model_name, layout))
    for warning in warnings:
        presenter.note(warning)

    result = FitResult(model=model, config=config)
    if resume is not None:
        result.epochs = [EpochMetrics(**row) for row in resume.metrics]
    keeper = _CheckpointKeeper(config, strategy, run_info or {}, out_dir, resume)
    per_epoch = samples_per_epoch(len(bundle.train), layout.workers, config)
    collector = EpochCollector(layout.workers, bundle.task, run_started=started)

    def on_report(report) -> None:
        metrics, reports = collector.add(report)
        if metrics is None:
            return
        result.epochs.append(metrics)
        presenter.end_epoch(metrics, config.epochs)
        keeper.offer(metrics.epoch, reports, result.epochs)
        if out_dir is not None:
            write_jsonl(out_dir / "metrics.jsonl", [m.as_dict() for m in result.epochs])
        if metrics.epoch < config.epochs:
            presenter.start_epoch(metrics.epoch + 1, config.epochs, per_epoch)

    initial_state = copy.deepcopy(model.state_dict()) if config.max_restarts else None
    try:
        while True:
            latest = keeper.latest
            if latest is not None:
                model.load_state_dict(latest.model)
            elif initial_state is not None:
                model.load_state_dict(initial_state)
            job = Job(config=config, bundle=bundle, model=model, strategy=strategy,
                      layout=layout, presenter=presenter, on_report=on_report,
                      start_epoch=latest.epoch if latest else 0,
                      rank_states=latest.ranks if latest else None,
                      checkpoint_every=keeper.every)
            del result.epochs[job.start_epoch:]
            collector.reset()
            if job.start_epoch < config.epochs:
                presenter.start_epoch(job.start_epoch + 1, config.epochs, per_epoch)
            try:
                if world is not None:
                    train_under_launcher(job, world)
                elif strategy.uses_worker_processes:
                    train_on_workers(job)
                else:
                    train_in_process(job)
                break
            except WorkerFailedError as failure:
                if result.restarts >= config.max_restarts:
                    raise
                result.restarts += 1
                presenter.close()
                restart_epoch = keeper.latest.epoch if keeper.latest else job.start_epoch
                presenter.note(f"{failure.headline}; restarting the workers from epoch "
                               f"{restart_epoch} "
                               f"(restart {result.restarts} of {config.max_restarts})")
    except (KeyboardInterrupt, Interrupted) as stop:
        presenter.close()
        signum = stop.signum if isinstance(stop, Interrupted) else signal.SIGINT
        raise RunInterrupted(_stop_message(signum, len(result.epochs), config, keeper,
                                           out_dir), 128 + signum) from None
    finally:
        presenter.close()

    wall_s = time.monotonic() - started
    result.summary = build_summary(config, bundle, model, model_name, layout, result.epochs,
                                   wall_s, collector.first_step_at - started
                                   if collector.first_step_at else None)
    result.summary["restarts"] = result.restarts
    if out_dir is not None:
        write_outputs(out_dir, result)
    presenter.result(result_lines(result.summary, out_dir))
    return result


class _CheckpointKeeper:
    """Assembles checkpoints from the ranks' parts; keeps the latest in memory (for
    restarts) and on disk (with --out and --checkpoint-every)."""

    def __init__(self, config, strategy, run_info, out_dir, resume):
        self.config, self.strategy, self.run_info = config, strategy, run_info
        self.out_dir = out_dir if config.checkpoint_every else None
        self.every = config.checkpoint_every or (1 if config.max_restarts else None)
        self.latest = resume
        self.saved_path: Path | None = None

    def offer(self, epoch: int, reports, epochs: list[EpochMetrics]) -> None:
        payloads = [r.checkpoint for r in reports]
        if not payloads or any(p is None for p in payloads):
            return
        self.latest = checkpoints.assemble(
            epoch, payloads, self.strategy.name, self.config.as_dict(), self.run_info,
            [m.as_dict() for m in epochs])
        if self.out_dir is not None:
            self.saved_path = checkpoints.save(self.out_dir, self.latest)


def _check_resumable(resume, config, workers) -> None:
    if resume.strategy != config.strategy:
        raise UserError(f"the checkpoint was written by strategy {resume.strategy!r}; resume "
                        f"with --strategy {resume.strategy}")
    if resume.world_size != workers:
        raise UserError(f"the checkpoint holds the state of {resume.world_size} workers; "
                        f"resume with --workers {resume.world_size}")


def _stop_message(signum, epochs_done, config, keeper, out_dir) -> str:
    name = signal.Signals(signum).name
    where = f"stopped by {name} after {epochs_done} of {config.epochs} epochs; every " \
            "worker was stopped"
    if keeper.saved_path is not None and keeper.latest is not None:
        return (f"{where}; last checkpoint: epoch {keeper.latest.epoch} in "
                f"{keeper.saved_path}; resume with: mptrain run --resume {out_dir}")
    return f"{where}; no checkpoint was written (use --out DIR --checkpoint-every 1 to be " \
           "able to resume)"
