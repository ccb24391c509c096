"""One run, start to end, in the order things happen: plan it with its launcher, check
everything that can be checked before a process starts, say what will happen, train (with
the restart policy of ``launch.restarts``), write the outputs. Each step is someone else's
job; this module only puts them in order. Supervised runs (``fit()``, ``mptrain run``) and
RL runs (``mptrain.rl``) both end up here; what differs between them is a
:class:`RunFamily` (banner, summary, closing lines, outputs)."""

from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import torch.nn as nn

from .callbacks import CallbackList
from .checkpoint import Checkpoint, CheckpointKeeper, check_resumable, load_model_state
from .engine.compiling import check_compilable
from .launch import warmup
from .launch.openmp import wait_policy_line
from .launch.out_lock import out_dir_held
from .launch.attempt import Job
from .launch.launchers import Launcher
from .launch.plan import RunPlan
from .launch.preflight import check_functions_importable, check_spawn_ready
from .launch.restarts import train_with_restarts
from .launch.start_method import AS_REQUESTED
from .report.console import ConsolePresenter
from .report.metrics import RoundMetrics
from .report.outputs import (prepare_out_dir, refuse_other_runs_outputs,
                             remove_other_runs_outputs)
from .report.recorder import RunRecorder
from .result import FitResult


class RunFamily(Protocol):
    """What one family of runs (supervised, RL: the strategies' ``family`` fact) says about
    itself and leaves behind. "Task" is the loss's kind alone (``engine.task``)."""

    #: The progress and metrics vocabulary of the run's reports (``data.sources`` task).
    kind: str
    #: What the run's processes are called in messages, and the command that resumes it.
    who: str
    command: str
    #: Run entries a checkpoint records (how to rebuild the data and model).
    run_info: dict
    #: What the strategy's workers train on (a shared data set, an environment's sizes).
    data: object
    #: How a worker scores a round (an ``engine.evaluation.RoundEvaluation`` class).
    evaluation: type

    def preflight(self, config, model, strategy, plan: RunPlan) -> list[str]:
        """Refuse what cannot run, before any process starts; warnings to show."""

    def data_fingerprint(self, config, resume: Checkpoint | None, launcher: Launcher,
                         keeps: bool) -> dict | None:
        """What the run's checkpoints record of what it trains on, where they are kept
        (``keeps``) or ``resume`` is checked against it (refused when other); None:
        nothing."""

    def result(self, model: nn.Module, config) -> FitResult:
        """An empty result of this kind of run."""

    def divergence_advice(self) -> str | None:
        """What a divergence of this run would be owed to rather than the learning rate
        (training data holding NaN), or None: a lower learning rate is the advice then."""

    def banner(self, config, model, plan: RunPlan) -> list[str]: ...

    def summary(self, config, model, plan: RunPlan, rows: list[RoundMetrics], wall_s: float,
                startup_s: float | None) -> dict: ...

    def result_lines(self, summary: dict, out_dir: Path | None) -> list[str]: ...

    def write_outputs(self, out_dir: Path, model: nn.Module, rows: list[RoundMetrics],
                      summary: dict) -> None: ...

    def before_plotting(self) -> None:
        """Work for the parent while its workers train (an import the outputs need)."""


@dataclass
class RunRequest:
    """One resolved run: its settings, strategy and launcher, what it trains, where its
    outputs go, what it resumes from, and who is told as it goes (experiment trackers by
    name, ``--tb-dir``, the caller's callbacks). The trackers are not settings: a resumed
    run may log elsewhere, and a checkpoint's settings stay those that shape training."""

    config: object
    strategy: object
    launcher: Launcher
    model: nn.Module
    family: RunFamily
    out: str | Path | None = None
    resume: Checkpoint | None = None
    quiet: bool = False
    extra_run_info: dict = field(default_factory=dict)
    loggers: tuple[str, ...] = ()
    tb_dir: str | Path | None = None
    callbacks: list = field(default_factory=list)


def run(request: RunRequest) -> FitResult:
    with ExitStack() as held:   # the --out folder, from its preparation to the last write
        return _run(request, held)


def _run(request: RunRequest, held: ExitStack) -> FitResult:
    started = time.monotonic()
    config, strategy, launcher, model, family = request.config, request.strategy, \
        request.launcher, request.model, request.family
    presenter = ConsolePresenter(quiet=request.quiet, **launcher.presenter_role())
    if getattr(config, "compile", False):   # before any process starts
        check_compilable(config.device)
    strategy.out_dir = Path(request.out) if request.out is not None \
        and launcher.writes_outputs else None
    plan = launcher.plan(config, strategy, model, family.data)
    if plan.start_method not in (None, "fork"):
        why = "" if plan.start_reason == AS_REQUESTED else plan.start_reason
        check_spawn_ready(model, why)
        check_functions_importable(config, why)
    callbacks = make_callbacks(request, presenter)
    joined = launcher.join(config, plan, request.out, request.resume)
    resume = joined.resume
    check_resumable(resume, config, plan.workers, strategy)
    if resume is not None:
        load_model_state(resume, model)
    machine_warnings = family.preflight(config, model, strategy, plan)
    out = request.out if launcher.writes_outputs else None
    keeps = out is not None and bool(config.checkpoint_every or joined.restartable)
    fingerprint = family.data_fingerprint(config, resume, launcher, keeps)
    out_dir = prepare_out_dir(out) if out is not None else None  # after every refusal
    held.enter_context(out_dir_held(out_dir))
    # A torchrun restart continues from the job's checkpoint in --out (``joined.resume``):
    # resumed there, it passes; a restart is no reason of its own (a first attempt refused
    # here would be restarted, and would then replace the other run's outputs).
    if out_dir is not None and not resumed_in(resume, out_dir):
        if config.overwrite:
            remove_other_runs_outputs(out_dir)
        else:   # after the lock: a live run is the lock's to name
            refuse_other_runs_outputs(out_dir)
    run_info = {**family.run_info, **request.extra_run_info, **joined.run_info}
    keeper = CheckpointKeeper(config, run_info, out_dir, resume,
                              keep_on_disk=joined.restartable, data=fingerprint)
    # How OpenMP threads wait: only where a worker has more than one to wait for, and
    # they spin by default.
    waiting = [line for line in [wait_policy_line()] if line] if plan.threads > 1 else []
    presenter.banner(family.banner(config, model, plan) + waiting
                     + strategy.describe(plan, model)
                     + tracker_lines(callbacks) + resume_lines(config, resume))
    for note in joined.notes:
        presenter.note(note)
    for warning in machine_warnings:
        presenter.machine_note(warning)

    result = family.result(model, config)
    if resume is not None:
        result.epochs = [RoundMetrics.from_dict(row) for row in resume.metrics]
    recorder = RunRecorder(config, strategy, family.kind, presenter, keeper, out_dir,
                           plan.workers, strategy.samples_per_round(family.data, plan.workers),
                           started, result.epochs, model=model, callbacks=callbacks,
                           divergence_advice=family.divergence_advice())
    try:
        # Trackers open here, before the workers fork: none of them leaves a thread running
        # by then (W&B, which must, opens at the first round's end).
        callbacks.on_run_start(config, run_info, resume.epoch if resume is not None else None)
        try:
            result.restarts = train_with_restarts(
                Job(config=config, bundle=family.data, model=model, strategy=strategy,
                    plan=plan, presenter=presenter, on_report=recorder.on_report,
                    checkpoint_every=keeper.every, evaluation=family.evaluation,
                    while_workers_train=family.before_plotting if out_dir is not None else None),
                keeper, recorder, launcher, who=family.who, command=family.command)
        finally:
            strategy.finish(model)
        warmup.wait_for_imports()  # the plotting import, before the plot

        wall_s = time.monotonic() - started
        first = recorder.first_step_at
        result.summary = family.summary(config, model, plan, result.epochs, wall_s,
                                      first - started if first else None)
        result.summary.update(strategy.summary_fields())
        result.summary["restarts"] = result.restarts
        if out_dir is not None:
            family.write_outputs(out_dir, model, result.epochs, result.summary)
    except BaseException as error:
        callbacks.on_abort(error)
        raise
    callbacks.on_end(result.summary, out_dir)
    presenter.result(family.result_lines(result.summary, out_dir))
    return result


def resumed_in(resume: Checkpoint | None, out_dir: Path) -> bool:
    """Whether the run resumes from a checkpoint in ``out_dir``: it continues the run whose
    outputs are there."""
    if resume is None or resume.source is None:
        return False
    return Path(resume.source).resolve().parent == Path(out_dir).resolve()


def make_callbacks(request: RunRequest, presenter) -> CallbackList:
    """The run's trackers and the caller's callbacks, in the process that presents the run
    (the others of a torchrun job check the trackers' needs and get none). A tracker's
    failure is a note: the run goes on."""
    enabled = request.launcher.writes_outputs
    trackers = []
    if request.loggers or request.tb_dir is not None:
        from .trackers import make_trackers

        trackers = make_trackers(request.loggers, request.out, request.tb_dir,
                                 warn=presenter.note, enabled=enabled)
    return CallbackList(trackers, request.callbacks if enabled else (), warn=presenter.note)


def resume_lines(config, resume: Checkpoint | None) -> list[str]:
    if resume is None:
        return []
    return [f"resuming from {config.unit} {resume.epoch} of {config.units}"]


def tracker_lines(callbacks: CallbackList) -> list[str]:
    if not callbacks.trackers:
        return []
    from .trackers import describe

    return [f"logging to {describe(callbacks.trackers)}"]
