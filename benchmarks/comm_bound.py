"""Communication-bound models (issue 24): mptrain ddp over shared memory against torch's DDP
over gloo, on a 5.9M-parameter MLP and a ResNet-18 for 32x32 inputs, synthetic data, 2
workers with one thread each; and what one step's gradient average costs against the
physical floor.

    python benchmarks/comm_bound.py --json auto          # the measurement (a quiet machine)
    python benchmarks/comm_bound.py --smoke              # checks the script only (~2 min)
    python benchmarks/comm_bound.py --models mlp --repeats 5 --parts throughput

The workloads are ``benchmarks/comm_workloads.py`` (user code to mptrain: ``--data
benchmarks/comm_workloads.py:synthetic_images --model benchmarks/comm_workloads.py:mlp_6m``
or ``:resnet18_32``): 25,600 seeded 3x32x32 images in 10 classes; SGD lr 0.02 momentum 0.9,
batch 64 per worker, seed 0 (the same initial weights in both runners).

**Throughput** (``--parts throughput``). For each model and each of ``--repeats`` (A B A B
..., so drift of the machine hits both alike), two fresh commands through
``common.run_measured``:

- mptrain: ``python -m mptrain run --strategy ddp --workers 2 --threads-per-worker 1
  --start-method fork --epochs 1 --steps-per-epoch N`` (this tree's ``src``); samples/s is
  its ``train_samples_per_s`` (first rank's first step to last rank's last step);
- torch DDP: ``baselines/plain_ddp_synthetic.py`` (fork, gloo, DDP's default buckets
  overlapped with backward, N steps per rank, ``--torch-loader``); samples/s timed on rank 0
  between barriers around the N steps.

The table gives each runner's samples/s (median, min-max), the training loss over the steps
and the test accuracy after them (sanity: the loss falls, accuracy rises above 10%), and the
ratio mptrain / torch DDP computed per repeat from that repeat's pair, then the median and
min-max of those ratios (above 1: mptrain trains faster). Issue 24 asks for >= 1.5.

**Collectives** (``--parts collectives``, see ``comm_collectives.py``): per model, the
milliseconds per step of mptrain's shared-memory average (``average_`` of the gradients,
``broadcast_`` of the buffers; for the CNN with contiguous and with channels-last
gradients, the layout mptrain's replicas train in), of DDP's bucketed gloo all-reduce
(without the overlap with backward), and of one batch's forward and backward; and the
floor: the bytes one rank copies per step in the shared-memory average (3.25 x the
gradient bytes, plus the buffers: counted in ``comm_collectives.shm_bytes_copied``)
divided by the memcpy bandwidth of one process while 2 copy at once. "x floor" is a
collective's milliseconds over the floor's.

Every figure is a median with min-max; nothing asserts anything about time. ``--json
auto`` writes ``benchmarks/results/comm-bound-DATE.json`` (machine facts, settings, every
run, the ratios, the collective cells).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (REPO, machine_info, result_path, run_measured, summarize,  # noqa: E402
                    write_json)

import torch  # noqa: E402

import comm_collectives  # noqa: E402

PYTHON = sys.executable
WORKLOADS = "benchmarks/comm_workloads.py"
FACTORIES = {"mlp": "mlp_6m", "resnet18": "resnet18_32"}
#: Steps per worker and run: the MLP's step is short, the ResNet's a second or more on CPU.
STEPS = {"mlp": 200, "resnet18": 30}
MPTRAIN_ENV = {"PYTHONPATH": os.pathsep.join(
    [str(REPO / "src")] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}


def mptrain_run(model, args, out):
    command = [PYTHON, "-m", "mptrain", "run", "--strategy", "ddp", "--workers", "2",
               "--threads-per-worker", "1", "--start-method", "fork",
               "--data", f"{WORKLOADS}:{args.data}", "--model", f"{WORKLOADS}:{FACTORIES[model]}",
               "--epochs", "1", "--steps-per-epoch", str(args.steps[model]),
               "--batch-size", str(args.batch_size), "--optimizer", "sgd", "--lr", str(args.lr),
               "--momentum", "0.9", "--lr-decay", "1", "--seed", "0", "--quiet",
               "--out", str(out)]
    measured = run_measured(command, env=MPTRAIN_ENV, sample_memory=False)
    if measured["returncode"] != 0:
        return None, measured
    summary = json.loads((Path(out) / "summary.json").read_text())
    return {"samples_per_s": summary["train_samples_per_s"],
            "train_loss": summary["final_train_loss"], "test_loss": summary["test_loss"],
            "accuracy": summary["test_accuracy"], "wall_s": measured["wall_s"]}, measured


def torch_ddp_run(model, args, out):
    result = Path(out) / "result.json"
    command = [PYTHON, str(REPO / "benchmarks" / "baselines" / "plain_ddp_synthetic.py"),
               "--model", model, "--data", args.data, "--workers", "2",
               "--steps", str(args.steps[model]), "--batch-size", str(args.batch_size),
               "--optimizer", "sgd", "--lr", str(args.lr), "--momentum", "0.9",
               "--start-method", "fork", "--loader", args.torch_loader, "--json", str(result)]
    measured = run_measured(command, env=MPTRAIN_ENV, sample_memory=False)
    if measured["returncode"] != 0 or not result.exists():
        return None, measured
    data = json.loads(result.read_text())
    return {"samples_per_s": data["samples_per_s"], "train_loss": data["train_loss"],
            "test_loss": data["test_loss"], "accuracy": data["accuracy"],
            "wall_s": measured["wall_s"]}, measured


RUNNERS = {"mptrain ddp (shm)": mptrain_run, "torch DDP (gloo)": torch_ddp_run}


def throughput(args) -> dict:
    """Every (model, runner) once per repeat, interleaved; runs by model and runner."""
    runs = {model: {runner: [] for runner in RUNNERS} for model in args.models}
    for repeat in range(args.repeats):
        for model in args.models:
            for runner, run in RUNNERS.items():
                with tempfile.TemporaryDirectory() as out:
                    row, measured = run(model, args, out)
                if row is None:
                    print(f"  {model} {runner}: FAILED (exit {measured['returncode']})\n"
                          f"{measured['output'][-2000:]}", flush=True)
                else:
                    print(f"  repeat {repeat + 1}/{args.repeats} {model:<9} {runner:<18} "
                          f"{row['samples_per_s']:8.1f} samples/s  loss {row['train_loss']:.3f}"
                          f"  acc {100 * row['accuracy']:.1f}%", flush=True)
                runs[model][runner].append(row)   # None keeps the repeats paired
    return runs


def throughput_table(runs) -> list[dict]:
    rows = []
    print("\n| model | runner | samples/s median (min-max) | train loss | test acc % "
          "| mptrain / torch DDP, paired per repeat |")
    print("|---|---|---|---|---|---|")
    for model, by_runner in runs.items():
        ours, theirs = (by_runner[name] for name in RUNNERS)
        paired = [a["samples_per_s"] / b["samples_per_s"] for a, b in zip(ours, theirs)
                  if a is not None and b is not None]
        ratio = summarize(paired)
        for runner, entries in by_runner.items():
            done = [e for e in entries if e is not None]
            speed = summarize([e["samples_per_s"] for e in done])
            row = {"model": model, "runner": runner, "failures": len(entries) - len(done),
                   "samples_per_s": speed,
                   "train_loss": summarize([e["train_loss"] for e in done]),
                   "test_accuracy": summarize([e["accuracy"] for e in done]), "runs": entries}
            rows.append(row)
            last = ""
            if runner == next(iter(RUNNERS)):
                row["ratio_to_torch_ddp"] = {**ratio, "per_repeat": paired}
                last = _median_range(ratio, "{:.2f}")
            print(f"| {model} | {runner} | {_median_range(speed, '{:,.1f}')} | "
                  f"{_fmt(row['train_loss']['median'], '{:.3f}')} | "
                  f"{_fmt(row['test_accuracy']['median'], '{:.1f}', 100)} | {last} |")
    return rows


def collectives(args) -> dict:
    """The memcpy bandwidth, and per model the collective cells and the floor."""
    c = args.collective
    bandwidth = {f"{n}_process": comm_collectives.memcpy_bandwidth(c["memcpy_numel"],
                                                                     c["memcpy_rounds"], n)
                 for n in (1, 2)}
    cells = []
    for model in args.models:
        floor = comm_collectives.shm_bytes_copied(model)
        floor_s = floor["total"] / bandwidth["2_process"]
        layouts = (False, True) if model == "resnet18" else (False,)
        for channels_last in layouts:
            shm = comm_collectives.shm_step_collective(
                model, channels_last, c["warmup"], c["rounds"], c["compute_batch"],
                c["compute_rounds"])
            cells.append({"model": model, "path": "shm", "channels_last": channels_last,
                          **shm, "floor_s": floor_s, "bytes_copied": floor})
        gloo_s = comm_collectives.gloo_step_collective(model, c["warmup"], c["rounds"])
        cells.append({"model": model, "path": "gloo (DDP buckets)", "channels_last": False,
                      "collective_s": gloo_s, "compute_s": None, "floor_s": floor_s,
                      "bytes_copied": floor})
    return {"memcpy_bytes_per_s": bandwidth, "cells": cells}


def collectives_table(result, numel: int) -> None:
    bandwidth = result["memcpy_bytes_per_s"]
    print(f"\nmemcpy (copy_ of {numel * 4 / 2**20:.0f} MiB): "
          f"{bandwidth['1_process'] / 1e9:.2f} GB/s in 1 process, "
          f"{bandwidth['2_process'] / 1e9:.2f} GB/s per process with 2 at once")
    print("\n| model | path | gradient MB | MB copied / rank | floor ms | collective ms "
          "| x floor | fwd+bwd ms | collective / (fwd+bwd) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for cell in result["cells"]:
        path = cell["path"] + (" channels-last" if cell["channels_last"] else "")
        copied = cell["bytes_copied"]
        compute = cell["compute_s"]
        print(f"| {cell['model']} | {path} | {copied['parameter_bytes'] / 1e6:.1f} | "
              f"{copied['total'] / 1e6:.1f} | {cell['floor_s'] * 1e3:.2f} | "
              f"{cell['collective_s'] * 1e3:.2f} | {cell['collective_s'] / cell['floor_s']:.1f} | "
              f"{_fmt(compute, '{:.1f}', 1e3)} | "
              f"{_fmt(compute and cell['collective_s'] / compute, '{:.2f}')} |")


def _fmt(value, spec, scale=1.0):
    return "-" if value is None else spec.format(value * scale)


def _median_range(stats, spec):
    if stats["median"] is None:
        return "-"
    return f"{spec.format(stats['median'])} ({spec.format(stats['min'])}-" \
           f"{spec.format(stats['max'])})"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,resnet18", help="comma-separated: mlp, resnet18")
    parser.add_argument("--parts", default="throughput,collectives",
                        help="comma-separated: throughput, collectives")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, help="steps per worker and run (default: mlp "
                        f"{STEPS['mlp']}, resnet18 {STEPS['resnet18']})")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.02)
    parser.add_argument("--torch-loader", default="dataloader", choices=("dataloader", "index"),
                        help="torch DDP's batches: the tutorial's DataLoader, or one tensor "
                             "index per batch as mptrain gathers them")
    parser.add_argument("--rounds", type=int, default=50, help="timed collectives per cell")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes and one repeat: checks the script, measures nothing")
    parser.add_argument("--json", help="write the figures here (auto: "
                        "benchmarks/results/comm-bound-DATE.json)")
    args = parser.parse_args(argv)
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    if set(args.models) - set(FACTORIES) or parts - {"throughput", "collectives"}:
        parser.error("--models takes mlp, resnet18; --parts takes throughput, collectives")
    # Forked measurement processes must find no OpenMP pool in this process.
    torch.set_num_threads(1)
    args.data = "synthetic_images_small" if args.smoke else "synthetic_images"
    if args.smoke:
        args.repeats, args.batch_size = 1, 16
        args.steps = {m: args.steps or 3 for m in FACTORIES}
        args.collective = {"warmup": 1, "rounds": 3, "compute_batch": 8, "compute_rounds": 1,
                           "memcpy_numel": 4 << 20, "memcpy_rounds": 3}
    else:
        args.steps = {m: args.steps or STEPS[m] for m in FACTORIES}
        args.collective = {"warmup": 5, "rounds": args.rounds,
                           "compute_batch": args.batch_size, "compute_rounds": 5,
                           "memcpy_numel": 64 << 20, "memcpy_rounds": 20}
    train_size = 1_024 if args.smoke else 25_600   # comm_workloads' two sizes
    if max(args.steps.values()) * args.batch_size * 2 > train_size:
        # mptrain's --steps-per-epoch cuts an epoch, it does not add one.
        parser.error(f"--steps x --batch-size x 2 workers is more than one epoch of "
                     f"{train_size} training images")
    args.json = result_path("comm-bound", args.json)

    output = {"machine": machine_info(), "smoke": args.smoke, "models": args.models,
              "data": args.data, "workers": 2, "threads_per_worker": 1,
              "batch_size": args.batch_size, "steps": args.steps, "lr": args.lr,
              "momentum": 0.9, "optimizer": "sgd", "torch_loader": args.torch_loader,
              "repeats": args.repeats, "collective_settings": args.collective}
    if "throughput" in parts:
        print(f"throughput: {len(args.models)} model(s) x {len(RUNNERS)} runners, "
              f"{args.repeats} repeat(s)", flush=True)
        output["throughput"] = throughput_table(throughput(args))
    if "collectives" in parts:
        print("\ncollectives: memcpy, shm and gloo per step, 2 forked ranks", flush=True)
        output["collectives"] = collectives(args)
        collectives_table(output["collectives"], args.collective["memcpy_numel"])
    if args.json:
        write_json(args.json, output)
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
