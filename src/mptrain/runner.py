"""Run one training job: prepare shared state, train in-process or on supervised workers,
collect per-epoch metrics, write outputs. ``fit()`` and the CLI both end up here."""

from __future__ import annotations

import os
import platform
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import torch
import torch.nn as nn

from .comm.dist import DistSpec, TorchDistGroup
from .comm.shm import ShmGroupState
from .comm.solo import SoloGroup, SoloSpec
from .config import TrainConfig
from .data.sharding import shard_indices
from .data.sources import CLASSIFICATION, DataBundle
from .engine.loop import WorkerSetup, train
from .errors import UserError, WorkerFailedError
from .launch.board import ProgressBoard
from .launch.start_method import choose_start_method
from .launch.supervisor import Supervisor
from .launch.world import ExternalWorld, detect_external_world
from .launch.tuning import (apply_threads, child_environment, threads_per_worker, tune_malloc,
                            usable_cores)
from .launch.worker import WorkerPlan, worker_entry
from .report.console import ConsolePresenter
from .report.metrics import EpochCollector, EpochMetrics
from .report.outputs import save_state_dict, write_json, write_jsonl
from .report.plots import plot_curves
from .strategies import make_strategy


@dataclass
class FitResult:
    """What a run produced: the trained model, per-epoch metrics and the summary."""

    model: nn.Module
    config: TrainConfig
    epochs: list[EpochMetrics] = field(default_factory=list)
    summary: dict = field(default_factory=dict)

    @property
    def test_accuracy(self) -> float | None:
        return self.summary.get("test_accuracy")

    @property
    def test_mse(self) -> float | None:
        return self.summary.get("test_mse")


@dataclass
class RunLayout:
    """The resolved shape of a run, decided once in the parent and shown in the banner."""

    workers: int
    threads: int
    start_method: str | None
    start_reason: str
    comm: str


def run_training(config: TrainConfig, bundle: DataBundle, model: nn.Module, model_name: str,
                 presenter: ConsolePresenter | None = None,
                 out_dir: Path | None = None) -> FitResult:
    started = time.monotonic()
    world = detect_external_world()
    if world is not None and world.rank != 0:
        presenter, out_dir = ConsolePresenter(quiet=True), None  # rank 0 speaks and writes
    presenter = presenter or ConsolePresenter(quiet=config.quiet)
    strategy = make_strategy(config)
    layout = plan_layout(config, strategy, world)
    check_device(config)
    check_model_fits_data(model, bundle)
    samples_per_epoch = _samples_per_epoch(len(bundle.train), layout.workers)
    presenter.banner(banner_lines(config, bundle, model, model_name, layout))

    result = FitResult(model=model, config=config)
    collector = EpochCollector(layout.workers, bundle.task)

    def on_report(report) -> None:
        metrics = collector.add(report)
        if metrics is None:
            return
        result.epochs.append(metrics)
        presenter.end_epoch(metrics, config.epochs)
        if out_dir is not None:
            write_jsonl(out_dir / "metrics.jsonl", [m.as_dict() for m in result.epochs])
        if metrics.epoch < config.epochs:
            presenter.start_epoch(metrics.epoch + 1, config.epochs, samples_per_epoch)

    presenter.start_epoch(1, config.epochs, samples_per_epoch)
    try:
        if world is not None:
            _train_under_launcher(config, bundle, model, strategy, layout, world, presenter,
                                  on_report)
        elif strategy.uses_worker_processes:
            _train_on_workers(config, bundle, model, strategy, layout, presenter, on_report,
                              samples_per_epoch)
        else:
            _train_in_process(config, bundle, model, strategy, layout, presenter, on_report)
    finally:
        presenter.close()

    wall_s = time.monotonic() - started
    result.summary = build_summary(config, bundle, model, model_name, layout, result.epochs,
                                   wall_s, collector.first_step_at - started
                                   if collector.first_step_at else None)
    if out_dir is not None:
        write_outputs(out_dir, result)
    presenter.result(result_lines(result.summary, out_dir))
    return result


def plan_layout(config: TrainConfig, strategy, world: ExternalWorld | None = None) -> RunLayout:
    if world is not None:
        if config.strategy not in ("sync", "ddp"):
            raise UserError(f"strategy {config.strategy!r} cannot run under {world.launcher}: "
                            "only sync and ddp work across processes it starts (hogwild "
                            "needs one machine's shared memory); use --strategy ddp or sync")
        local = int(os.environ.get("LOCAL_WORLD_SIZE", world.world_size))
        threads = threads_per_worker(local, config.threads_per_worker)
        backend = "nccl" if config.device == "cuda" else "gloo"
        return RunLayout(world.world_size, threads, None, f"started by {world.launcher}",
                         backend)
    workers = config.workers or 1
    threads = threads_per_worker(workers, config.threads_per_worker)
    if not strategy.uses_worker_processes:
        return RunLayout(1, threads, None, "in this process", "none")
    method, reason = choose_start_method(config.start_method, config.device)
    return RunLayout(workers, threads, method, reason, comm_kind(config))


def comm_kind(config: TrainConfig) -> str:
    """How workers talk: shared memory between our own CPU processes, else torch.distributed."""
    if config.strategy == "ddp" and config.ddp_backend != "auto":
        return config.ddp_backend
    if config.device == "cuda" and config.strategy == "ddp":
        return "nccl"
    return "shm"


def _train_in_process(config, bundle, model, strategy, layout, presenter, on_report) -> None:
    tune_malloc()
    previous_threads = torch.get_num_threads()
    apply_threads(layout.threads)
    progress = _InProcessProgress(presenter)
    try:
        train(WorkerSetup(rank=0, config=config, data=bundle, model=model, strategy=strategy,
                          group=SoloGroup(), progress=progress, report=on_report,
                          device=torch.device(config.device)))
    finally:
        torch.set_num_threads(previous_threads)


def _train_under_launcher(config, bundle, model, strategy, layout, world, presenter,
                          on_report) -> None:
    """This process is one rank of a torchrun job: train here, gather reports to rank 0."""
    import torch.distributed as dist

    tune_malloc()
    apply_threads(layout.threads)
    if config.device == "cuda":
        torch.cuda.set_device(world.local_rank)
        device = torch.device("cuda", world.local_rank)
    else:
        device = torch.device("cpu")
    group = TorchDistGroup.init(layout.comm, world.rank, world.world_size,
                                config.worker_timeout, init_method="env://")

    def report(epoch_report):
        gathered = [None] * world.world_size
        dist.all_gather_object(gathered, epoch_report)
        if world.rank == 0:
            for item in gathered:
                on_report(item)

    progress = _InProcessProgress(presenter, scale=world.world_size)
    train(WorkerSetup(rank=world.rank, config=config, data=bundle, model=model,
                      strategy=strategy, group=group, progress=progress, report=report,
                      device=device))
    group.close()


def _train_on_workers(config, bundle, model, strategy, layout, presenter, on_report,
                      samples_per_epoch) -> None:
    # Everything workers share is put in shared memory once, here, before they start.
    bundle.share_memory_()
    model.share_memory()
    strategy.prepare(model)
    board = ProgressBoard.create(layout.workers)
    plan = WorkerPlan(config=config, data=bundle, model=model, strategy=strategy,
                      comm=make_comm(config, strategy, model, layout), board=board,
                      threads=layout.threads)
    if layout.start_method == "fork":
        _import_lazy_modules()
    epochs_reported = []

    def on_message(rank, report):
        on_report(report)
        epochs_reported.append(report.epoch)

    def on_tick():
        done_epochs = len(epochs_reported) // layout.workers
        in_epoch = board.samples_done() - done_epochs * samples_per_epoch
        presenter.update(max(0, min(samples_per_epoch, in_epoch)))

    supervisor = Supervisor(layout.start_method, heartbeat_timeout_s=config.worker_timeout,
                            seconds_since_beat=board.seconds_since_beat,
                            on_message=on_message, on_tick=on_tick)
    board.beat_all()
    with _environment(child_environment(layout.threads)):
        outcome = supervisor.run(worker_entry, [(plan,)] * layout.workers)
    if not outcome.ok:
        raise WorkerFailedError(describe_failures(outcome.failures), outcome.failures)


def make_comm(config, strategy, model, layout):
    if layout.comm == "shm":
        numel = max(strategy.comm_numel(model), 1)
        dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()),
                     torch.float32)
        return ShmGroupState.create(layout.workers, numel, dtype, config.worker_timeout,
                                    oversubscribed=layout.workers > usable_cores())
    if layout.comm in ("gloo", "nccl"):
        return DistSpec(layout.comm, layout.workers, config.worker_timeout)
    return SoloSpec()


def describe_failures(failures) -> str:
    lines = ["training failed: " + "; ".join(f.describe() for f in failures)]
    for failure in failures:
        if failure.traceback:
            lines.append(f"--- traceback of worker rank {failure.rank} ---")
            lines.append(failure.traceback.rstrip())
    return "\n".join(lines)


def check_device(config: TrainConfig) -> None:
    if config.device == "cuda" and torch.cuda.device_count() == 0:
        raise UserError("--device cuda was asked for but no CUDA device is visible; "
                        "use --device cpu")


def check_model_fits_data(model: nn.Module, bundle: DataBundle) -> None:
    """Run two samples through the model in the parent: a shape mismatch is a user error
    to report now, not a traceback from every worker later."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            output = model(bundle.train.inputs[:2])
    except Exception as err:
        raise UserError(f"the model cannot take the data's inputs of shape "
                        f"{tuple(bundle.input_shape)}: {type(err).__name__}: {err}") from None
    finally:
        model.train(was_training)
    if not isinstance(output, torch.Tensor):
        raise UserError(f"the model returned {type(output).__name__}; it must return a tensor")
    if bundle.task == CLASSIFICATION and (output.dim() != 2
                                          or output.shape[1] < bundle.output_size):
        raise UserError(f"the model's output has shape {tuple(output.shape)} but the data has "
                        f"{bundle.output_size} classes; it must return [batch, classes]")


def _samples_per_epoch(num_samples: int, workers: int) -> int:
    return len(shard_indices(num_samples, workers, 0, 0, 0, shuffle=False)) * workers


def _import_lazy_modules() -> None:
    """The first optimizer built in a process imports torch._dynamo (~1 s); pay it once
    here, before fork, instead of once per worker."""
    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)


@contextmanager
def _environment(values: dict):
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class _InProcessProgress:
    """Progress for ``single``: throttled updates of the presenter, no shared memory."""

    def __init__(self, presenter: ConsolePresenter, scale: int = 1):
        self._presenter = presenter
        self._scale = scale  # under torchrun, rank 0 stands for every rank's progress
        self._done = 0
        self._last = 0.0
        self._epoch_start = time.monotonic()

    def advance(self, samples: int) -> None:
        self._done += samples * self._scale
        now = time.monotonic()
        if now - self._last > 0.1:
            self._last = now
            self._presenter.update(self._done)

    def beat(self) -> None:
        self._done = 0


def banner_lines(config, bundle, model, model_name, layout) -> list[str]:
    params = sum(p.numel() for p in model.parameters())
    test = f" / {len(bundle.test):,} test" if bundle.test is not None else ""
    first = f"strategy [bold]{config.strategy}[/bold]"
    if layout.start_method:
        first += f" · {layout.workers} workers × {layout.threads} thread(s) " \
                 f"({usable_cores()} usable cores) · start method {layout.start_method} " \
                 f"({layout.start_reason})"
    elif layout.comm in ("gloo", "nccl"):
        first += f" · {layout.workers} ranks {layout.start_reason} × {layout.threads} " \
                 f"thread(s) each"
    else:
        first += f" · 1 process × {layout.threads} thread(s) ({usable_cores()} usable cores)"
    lines = [first,
             f"data {bundle.name}: {len(bundle.train):,} train{test} samples, "
             f"{bundle.nbytes / 2**20:.1f} MiB"
             + (" in shared memory once" if layout.start_method else ""),
             f"model {model_name}: {params:,} parameters · optimizer {config.optimizer} "
             f"lr {config.lr:g}" + (f" momentum {config.momentum:g}" if config.momentum else "")
             + f" · batch {config.batch_size} · {config.epochs} epochs · seed {config.seed}"]
    if config.strategy == "sync":
        every = f"every {config.sync_every} steps" if config.sync_every else "once per epoch"
        lines.append(f"parameters averaged {every}")
    if config.strategy == "ddp":
        lines.append(f"gradients averaged every step via {layout.comm}")
    if config.strategy == "hogwild":
        state = "shared" if config.share_optimizer_state else "per worker"
        lines.append(f"lock-free updates to shared parameters; optimizer state {state}")
    return lines


def build_summary(config, bundle, model, model_name, layout, epochs, wall_s,
                  startup_s) -> dict:
    last = epochs[-1] if epochs else None
    train_seconds = sum(m.epoch_s for m in epochs)
    summary = {
        "strategy": config.strategy,
        "workers": layout.workers,
        "threads_per_worker": layout.threads,
        "start_method": layout.start_method,
        "epochs": config.epochs,
        "data": bundle.name,
        "model": model_name,
        "optimizer": config.optimizer,
        "lr": config.lr,
        "momentum": config.momentum,
        "batch_size": config.batch_size,
        "sync_every": config.sync_every,
        "seed": config.seed,
        "train_samples": len(bundle.train),
        "test_samples": len(bundle.test) if bundle.test is not None else 0,
    }
    if bundle.task == CLASSIFICATION:
        summary["test_accuracy"] = last.test_accuracy if last else None
    else:
        summary["test_mse"] = last.test_mse if last else None
    summary.update({
        "test_loss": last.test_loss if last else None,
        "final_train_loss": last.train_loss if last else None,
        "train_samples_per_s": (sum(m.train_samples for m in epochs) / train_seconds
                                if train_seconds > 0 else None),
        "startup_s": startup_s,
        "process_start_to_first_step_s": _since_process_start(startup_s, wall_s),
        "wall_s": wall_s,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cores": usable_cores(),
        "logical_cpus": os.cpu_count(),
        "memory_bytes": psutil.virtual_memory().total,
    })
    linear = _single_linear(model)
    if linear is not None and bundle.task != CLASSIFICATION:
        summary["weight"], summary["bias"] = linear
    return summary


def _since_process_start(startup_s, wall_s):
    """Seconds from this interpreter's start to the first training step (imports included)."""
    if startup_s is None:
        return None
    run_started_wall = time.time() - wall_s
    return run_started_wall + startup_s - psutil.Process().create_time()


def _single_linear(model: nn.Module):
    """Weight and bias of a one-in, one-out linear model (``linreg``), else None."""
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    if len(linears) == 1 and linears[0].weight.numel() == 1 and linears[0].bias is not None:
        return float(linears[0].weight), float(linears[0].bias)
    return None


def write_outputs(out_dir: Path, result: FitResult) -> None:
    write_jsonl(out_dir / "metrics.jsonl", [m.as_dict() for m in result.epochs])
    save_state_dict(out_dir / "model.pt", result.model)
    if result.epochs:
        s = result.summary
        plot_curves(out_dir / "curves.png", [m.as_dict() for m in result.epochs],
                    f"{s['data']} · {s['model']} · {s['strategy']} × {s['workers']}")
    write_json(out_dir / "summary.json", result.summary)


def result_lines(summary: dict, out_dir: Path | None) -> list[str]:
    if summary.get("test_accuracy") is not None:
        score = f"test accuracy {100 * summary['test_accuracy']:.2f}%"
    elif summary.get("test_mse") is not None:
        score = f"test mse {summary['test_mse']:.4f}"
    elif summary.get("final_train_loss") is not None:
        score = f"final train loss {summary['final_train_loss']:.4f}"
    else:
        score = "no epoch completed"
    line = f"[bold]done[/bold]: {score} · {summary['wall_s']:.1f} s wall"
    if summary.get("train_samples_per_s"):
        line += f" · {summary['train_samples_per_s']:,.0f} train samples/s"
    lines = [line]
    if "weight" in summary:
        lines.append(f"learned y = {summary['weight']:.3f} x + {summary['bias']:.3f}")
    if out_dir is not None:
        lines.append(f"outputs in {out_dir}/: summary.json metrics.jsonl model.pt curves.png")
    return lines
