"""What a run says about itself: the banner, the summary.json record, the closing lines,
and the files written to --out."""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path
import psutil
import torch
import torch.nn as nn

from ..data.device_feed import RESIDENT_SHARE
from ..data.sources import CLASSIFICATION
from ..engine.gpu_memory import GPU_PEAK
from ..engine.compiling import compile_mode, describe as describe_compile
from ..engine.precision import FULL, describe as describe_precision
from ..engine.profile import PHASES, describe, shares
from ..errors import setting_name as named   # as the caller spelled the setting
from .outputs import outputs_line, save_state_dict, write_json, write_jsonl
from .words import count
from .plots import plot_curves


def banner_lines(config, bundle, model, model_name, plan) -> list[str]:
    params = sum(p.numel() for p in model.parameters())
    test = f" / {len(bundle.test):,} test" if bundle.test is not None else ""
    first = f"strategy [bold]{config.strategy}[/bold]"
    if plan.start_method:
        workers = count(plan.workers, "worker") + (
            f" taking turns in {count(plan.processes, 'process')}"
            if plan.processes else "")
        first += f" · {workers} × {count(plan.threads, 'thread')} " \
                 f"({plan.cores} usable cores) · start method {plan.start_method} " \
                 f"({plan.start_reason})"
    elif plan.local_workers is not None:
        first += f" · {count(plan.workers, 'rank')} {plan.start_reason} × " \
                 f"{count(plan.threads, 'thread')} each · collectives " \
                 f"{plan.comm.describe_for_launcher()}"
    else:
        first += f" · 1 process × {count(plan.threads, 'thread')} ({plan.cores} usable cores)"
    lines = [first,
             f"data {bundle.name}: {len(bundle.train):,} train{test} samples, "
             f"{bundle.nbytes / 2**20:.1f} MiB"
             + (" in shared memory once" if plan.start_method else
                " in shared memory once per node" if plan.local_workers is not None else ""),
             f"model {model_name}: {params:,} parameters · optimizer {config.optimizer} "
             f"lr {config.lr:g}{optimizer_terms(config)} · batch {config.batch_size} · "
             f"{count(config.units, config.unit)} · seed {config.seed}"]
    if config.precision != FULL:
        lines.append(f"precision {describe_precision(config.precision)}")
    if config.device == "cuda":
        lines.append(f"batches: each data set resident on the GPU where every rank's copy "
                     f"together takes at most {RESIDENT_SHARE:.0%} of its free memory, else "
                     "gathered in pinned memory and copied one batch ahead on a side stream")
    stream = stream_line(bundle, config)
    if stream:
        lines.append(stream)
    if config.augment or config.transform:
        done = [f"augment {config.augment}"] * bool(config.augment) + \
            [f"transform {config.transform}"] * bool(config.transform)
        lines.append(f"training batches in the workers: {' then '.join(done)}, drawn afresh "
                     "per batch (seed, epoch or round, step, rank or client)")
    if config.collate:
        lines.append(f"samples of different lengths: one flat tensor and offsets in shared "
                     f"memory, collated per batch in the workers ({config.collate})")
    if config.compile:
        strategy = config.strategy_class
        lines.append(describe_compile(config.device, compile_mode(
            config.device, strategy.no_cuda_graphs is None), strategy.no_cuda_graphs))
    if plan.sharing:
        lines.append(f"sharing strategy {plan.sharing} ({plan.sharing_reason})")
    return lines


def stream_line(bundle, config) -> str | None:
    """What the banner says of data read where it lies (``--loader stream``), and why
    ``auto`` chose it."""
    from ..data.stream import StreamDataset

    if not isinstance(bundle.train, StreamDataset):
        return None
    threads = config.loader_workers
    how = f"{threads} loader thread{'s' * (threads != 1)} per worker, up to " \
          f"{2 * threads} batches ahead" if threads else "read in the training thread"
    why = f" (instead of {bundle.loader_reason})" if bundle.loader_reason else ""
    return f"loader stream: each worker reads its own samples where the data lies, {how}{why}"


def optimizer_terms(config) -> str:
    """What the optimizer takes beside its rate: SGD's momentum, Adam's betas (``--momentum``
    is Adam's beta1, 0.9 when 0: ``engine.optim``)."""
    if config.optimizer == "adam":
        return f" betas {config.momentum or 0.9:g},0.999"
    return f" momentum {config.momentum:g}" if config.momentum else ""


def build_summary(config, bundle, model, model_name, plan, epochs, wall_s,
                  startup_s) -> dict:
    last = epochs[-1] if epochs else None
    train_seconds = sum(m.epoch_s for m in epochs)
    summary = {
        "strategy": config.strategy,
        "workers": plan.workers,
        # Worker processes: fewer than workers when ranks take turns in them.
        "processes": (plan.processes or plan.workers) if plan.start_method else None,
        "threads_per_worker": plan.threads,
        "start_method": plan.start_method,
        "device": config.device,
        "precision": config.precision,
        "compile": config.compile,
        "augment": config.augment,
        "transform": config.transform,
        "collate": config.collate,
        "data_dtype": config.data_dtype,
        "loader": "stream" if stream_line(bundle, config) else "stacked",
        "loader_reason": bundle.loader_reason,
        "epochs": config.epochs if config.unit == "epoch" else None,
        "unit": config.unit,
        "rounds_done": len(epochs),
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
        "cores": plan.cores,
        "logical_cpus": os.cpu_count(),
        "memory_bytes": psutil.virtual_memory().total,
    })
    profile = run_profile(epochs)
    if profile is not None:
        summary["time_shares"] = shares(profile)
    peaks = [m.extras[GPU_PEAK] for m in epochs if GPU_PEAK in m.extras]
    if peaks:
        summary[GPU_PEAK] = max(peaks)
    if config.target_accuracy is not None:
        reached = next((m.epoch for m in epochs if m.test_accuracy is not None
                        and m.test_accuracy >= config.target_accuracy), None)
        summary["target_accuracy"] = config.target_accuracy
        summary[f"target_reached_at_{config.unit}"] = reached
    linear = _single_linear(model)
    if linear is not None and bundle.task != CLASSIFICATION:
        summary["weight"], summary["bias"] = linear
    return summary


def run_profile(epochs) -> dict | None:
    """Seconds per phase of the ranks' steps over the run (the mean rank's), from the rounds'
    time_* columns; None when a round has none (RL, fedavg, a resumed run's older rows)."""
    columns = [m.extras.get(f"time_{phase}") for m in epochs for phase in PHASES]
    if not epochs or any(value is None for value in columns):
        return None
    return {phase: sum(m.extras[f"time_{phase}"] for m in epochs) for phase in PHASES}


def _since_process_start(startup_s, wall_s):
    """Seconds from this interpreter's start to the first training step (imports included)."""
    if startup_s is None:
        return None
    return process_age_s() - wall_s + startup_s


def process_age_s() -> float:
    """Seconds since this process started, to the clock tick.

    psutil's create_time() is anchored on the boot time in whole seconds, which put every
    start-up figure off by up to a second; /proc/self/stat counts ticks since boot.
    """
    try:
        with open("/proc/self/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime
        return time.clock_gettime(time.CLOCK_BOOTTIME) - started
    except (OSError, IndexError, ValueError, AttributeError):
        return time.time() - psutil.Process().create_time()


def _single_linear(model: nn.Module):
    """Weight and bias of a one-in, one-out linear model (``linreg``), else None."""
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    if len(linears) == 1 and linears[0].weight.numel() == 1 and linears[0].bias is not None:
        return linears[0].weight.detach().item(), linears[0].bias.detach().item()
    return None


def write_outputs(out_dir: Path, model, epochs, summary: dict) -> None:
    write_jsonl(out_dir / "metrics.jsonl", [m.as_dict() for m in epochs])
    save_state_dict(out_dir / "model.pt", model)
    if epochs:
        plot_curves(out_dir / "curves.png", [m.as_dict() for m in epochs],
                    f"{summary['data']} · {summary['model']} · {summary['strategy']} × "
                    f"{summary['workers']}", summary.get("unit", "epoch"))
    write_json(out_dir / "summary.json", summary)


# The profile's clocks are the host's: on a GPU forward and backward only launch kernels
# (an H200 run of sync x2 showed compute 47%, collective 45%), and their time lands where
# the host first waits for the device -- the collective's copy of the parameters to host
# memory. Said beside the figures rather than synchronising every lap, which would cost
# every step what it measures.
CUDA_HOST_TIME = ("host time: CUDA kernels run asynchronously, so the GPU's work is counted "
                  "where the host waits for it (mostly the collective's copies)")


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
    unit = summary.get("unit", "epoch")
    if summary.get("target_accuracy") is not None:
        reached = summary.get(f"target_reached_at_{unit}")
        target = f"{100 * summary['target_accuracy']:.2f}%"
        lines.append(f"target accuracy {target} reached at {unit} {reached}" if reached
                     else f"target accuracy {target} not reached")
    if summary.get("time_shares") and (summary.get("workers") or 1) > 1:
        line = f"step time per rank: {describe(summary['time_shares'])}"
        if summary.get("device") == "cuda":
            line += f"; {CUDA_HOST_TIME}"
        lines.append(line)
    if "weight" in summary:
        lines.append(f"learned y = {summary['weight']:.3f} x + {summary['bias']:.3f}")
    if summary.get("epsilon") is not None:   # fedavg with --dp-noise
        line = (f"privacy spent: epsilon {summary['epsilon']:.3g} at delta "
                f"{summary['dp_delta']:g} ({summary.get('accountant', 'rdp')} accountant)")
        if summary.get("stopped_for_privacy_at_round"):
            line += (f"; stopped after round {summary['stopped_for_privacy_at_round']}, "
                     f"before {named('target_epsilon')} {summary['target_epsilon']:g}")
        lines.append(line)
    if out_dir is not None:
        lines.append(outputs_line(out_dir))
    return lines
