"""What mptrain's CUDA paths do on a real GPU today: every strategy with ``--device cuda``,
one command, one JSON.

No CUDA line of mptrain had run before a session was lent a GPU, so this script is a check
as much as a benchmark: each case is one ``mptrain run`` (digits-60k, one epoch, the
defaults otherwise) whose exit code, last output lines and summary figures are recorded,
failures included, next to the same run on the machine's CPUs. Run it on the GPU machine:

    pip install --no-deps -e . && python benchmarks/gpu.py --json "$OUT/gpu.json"

It prints a table for benchmarks/README.md and never asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_info, write_json  # noqa: E402

RUN = [sys.executable, "-m", "mptrain", "run", "--data", "digits-60k"]
EPOCH = ["--epochs", "1"]
FEDAVG = ["--strategy", "fedavg", "--workers", "2", "--rounds", "10", "--device", "cuda"]

# (label, extra arguments). The CPU row is the same run on the GPU machine's cores.
CASES = [
    ("single cpu", EPOCH + ["--strategy", "single", "--device", "cpu"]),
    ("single cuda", EPOCH + ["--strategy", "single", "--device", "cuda"]),
    ("single cuda bf16", EPOCH + ["--strategy", "single", "--device", "cuda",
                                  "--precision", "bf16"]),
    ("hogwild x2 cuda", EPOCH + ["--strategy", "hogwild", "--workers", "2", "--device", "cuda"]),
    ("hogwild x4 cuda", EPOCH + ["--strategy", "hogwild", "--workers", "4", "--device", "cuda"]),
    ("sync x2 cuda", EPOCH + ["--strategy", "sync", "--workers", "2", "--device", "cuda"]),
    ("ddp x1 cuda (nccl)", EPOCH + ["--strategy", "ddp", "--workers", "1", "--device", "cuda"]),
    ("ddp x2 cuda (auto: shm)", EPOCH + ["--strategy", "ddp", "--workers", "2",
                                         "--device", "cuda"]),
    ("ddp x2 cuda (gloo)", EPOCH + ["--strategy", "ddp", "--workers", "2", "--device", "cuda",
                                    "--ddp-backend", "gloo"]),
    ("ddp x2 cuda (nccl asked)", EPOCH + ["--strategy", "ddp", "--workers", "2",
                                          "--device", "cuda", "--ddp-backend", "nccl"]),
    ("dp cuda (all visible GPUs)", EPOCH + ["--strategy", "dp", "--device", "cuda"]),
    ("fedavg x2 cuda", FEDAVG),
    ("fedavg x2 cuda fedprox", FEDAVG + ["--prox-mu", "0.01"]),
    ("fedavg x2 cuda scaffold", FEDAVG + ["--scaffold"]),
    ("fedavg x2 cpu", FEDAVG[:-1] + ["cpu"]),
]

#: Issue 40's figures, one sitting: single eager vs compiled (the compiled run's first step
#: is in its own column), sync and ddp with 4 ranks on the one GPU (both collectives), and
#: fedavg's ranks under torchrun on the GPU. ``bash benchmarks/gpu_check.sh speed`` runs
#: them beside the plain loop.
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc-per-node", "2", "-m", "mptrain", "run", "--data", "digits-60k"]
SPEED_CASES = [
    ("single cuda", EPOCH + ["--strategy", "single", "--device", "cuda"]),
    ("single cuda --compile", EPOCH + ["--strategy", "single", "--device", "cuda",
                                       "--compile"]),
    ("sync x4 cuda", EPOCH + ["--strategy", "sync", "--workers", "4", "--device", "cuda"]),
    ("ddp x4 cuda (auto: shm)", EPOCH + ["--strategy", "ddp", "--workers", "4",
                                         "--device", "cuda"]),
    ("ddp x4 cuda (gloo)", EPOCH + ["--strategy", "ddp", "--workers", "4", "--device", "cuda",
                                    "--ddp-backend", "gloo"]),
    ("hogwild x4 cuda --compile", EPOCH + ["--strategy", "hogwild", "--workers", "4",
                                           "--device", "cuda", "--compile"]),
    ("fedavg torchrun x2 cuda", ["--strategy", "fedavg", "--rounds", "5", "--device", "cuda"],
     TORCHRUN),
    ("fedavg torchrun x2 cuda median", ["--strategy", "fedavg", "--rounds", "5", "--device",
                                        "cuda", "--aggregator", "median"], TORCHRUN),
]
SETS = {"paths": CASES, "speed": SPEED_CASES}

FIGURES = ("train_samples_per_s", "test_accuracy", "wall_s", "process_start_to_first_step_s",
           "start_method", "gpu_peak_bytes")


def run_case(label: str, extra: list[str], timeout_s: float, head: list[str] = RUN) -> dict:
    with tempfile.TemporaryDirectory(prefix="mptrain-gpu-") as out:
        command = head + extra + ["--out", out]
        started = time.monotonic()
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
            code, output = done.returncode, done.stdout + done.stderr
        except subprocess.TimeoutExpired as expired:
            code = "timeout"
            output = (expired.stdout or b"").decode() + (expired.stderr or b"").decode()
        result = {"case": label, "args": extra, "exit": code,
                  "seconds": round(time.monotonic() - started, 1),
                  "output_tail": output.strip().splitlines()[-12:]}
        summary = Path(out) / "summary.json"
        if summary.is_file():
            facts = json.loads(summary.read_text())
            result.update({key: facts.get(key) for key in FIGURES})
    return result


def hogwild_shares_the_parents_parameters() -> dict:
    """Hogwild on a GPU must train the parent's CUDA tensors (workers hold IPC handles to
    them), not private copies: after ``fit`` the caller's model has moved from its start."""
    import torch
    import torch.nn as nn
    from torch.utils.data import TensorDataset

    import mptrain

    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(4096, 20, generator=generator)
    targets = (inputs[:, :5].sum(1) > 0).long()
    data = TensorDataset(inputs, targets)
    model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 2))
    start = [p.detach().clone() for p in model.parameters()]
    result = mptrain.fit(model, data, data, strategy="hogwild", workers=2, epochs=2,
                         device="cuda", lr=0.05)
    moved = max((p.detach().cpu() - s).abs().max().item()
                for p, s in zip(model.parameters(), start))
    return {"parameters_on": str(next(model.parameters()).device),
            "largest_change_of_the_callers_parameters": moved,
            "test_accuracy": result.test_accuracy}


def gpu_facts() -> dict:
    import torch

    if not torch.cuda.is_available():
        return {"available": False}
    props = torch.cuda.get_device_properties(0)
    return {"available": True, "name": props.name, "count": torch.cuda.device_count(),
            "memory_gib": round(props.total_memory / 2**30, 1), "cuda": torch.version.cuda}


def table(results: list[dict]) -> str:
    lines = ["| case | exit | samples/s | test acc. | wall s | first step s | GPU peak MiB |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        if r.get("gpu_peak_bytes") is not None:
            r = {**r, "gpu_peak_mib": r["gpu_peak_bytes"] / 2**20}

        def cell(key, fmt):
            return fmt.format(r[key]) if r.get(key) is not None else "-"
        lines.append(f"| {r['case']} | {r['exit']} | {cell('train_samples_per_s', '{:,.0f}')} "
                     f"| {cell('test_accuracy', '{:.2%}')} | {cell('wall_s', '{:.1f}')} "
                     f"| {cell('process_start_to_first_step_s', '{:.1f}')} "
                     f"| {cell('gpu_peak_mib', '{:,.0f}')} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--timeout", type=float, default=150, help="seconds per case")
    parser.add_argument("--only", help="comma-separated case labels to run")
    parser.add_argument("--set", choices=sorted(SETS), default="paths",
                        help="paths: every strategy's --device cuda run (default); speed: "
                             "issue 40's figures (compile, 4 ranks on one GPU, torchrun)")
    parser.add_argument("--hogwild-check-only", action="store_true",
                        help="only check that hogwild trains the parent's CUDA parameters")
    args = parser.parse_args()
    wanted = set(args.only.split(",")) if args.only else None
    results = []
    if args.hogwild_check_only:
        print(json.dumps(hogwild_shares_the_parents_parameters()))
        return
    for label, extra, *head in SETS[args.set]:
        if wanted and label not in wanted:
            continue
        results.append(run_case(label, extra, args.timeout, *head))
        r = results[-1]
        print(f"{label}: exit {r['exit']} in {r['seconds']} s", flush=True)
        if r["exit"] != 0:
            print("   " + "\n   ".join(r["output_tail"]), flush=True)
    print(table(results))
    report = {"machine": machine_info(), "gpu": gpu_facts(),
              "env": {k: os.environ[k] for k in ("CUDA_VISIBLE_DEVICES",) if k in os.environ},
              "results": results}
    if args.json:
        write_json(Path(args.json), report)


if __name__ == "__main__":
    main()
