"""fedavg's clients one at a time (``--vectorize-clients off``) against stacked (``on``, and
``auto`` where the issue asks for it), side by side in one sitting, on issue 39's workloads.

    python benchmarks/fl_vectorized.py [--data-dir DIR] [--device cpu|cuda] [--rounds 50]
        [--workers 1] [--threads-per-worker N] [--cases 2nn-100x10,2nn-1200x50,cnn-1200x50,cnn-100x10]
        [--repeats 1] [--vectorize-chunk N] [--quick] [--json auto]
    python benchmarks/fl_vectorized.py --plain [--threads-per-worker N] [--repeats 15]

MNIST, IID clients, client SGD lr 0.1 without momentum, B=10, E=1, seed 0; the test set
evaluated after the last round only (so a round's time is its training and the server
step). Cases:

  2nn-100x10   McMahan 2NN, 100 clients of 600 samples, 10 per round: off, on
  2nn-1200x50  McMahan 2NN, 1,200 clients of 50 samples, 50 per round (pfl-research's
               benchmark shape): off, on
  cnn-1200x50  McMahan CNN, the same shape: off, auto (and on, on a GPU)
  cnn-100x10   McMahan CNN, 100 clients, 10 per round: off, auto (and on, on a GPU)

s/round is the median of every round but the first (which pays for start-up: the first
stacked call, the data's first touch); "x off" is off's s/round over the mode's, of the
same repeat. Accuracy is the test accuracy after the last round. Issue 39's targets are
printed beside the figures: on a 2-core CPU, 2nn-100x10 on >= 1.4x, 2nn-1200x50 on >= 2.5x,
the CNN with auto never more than 5% slower than off, accuracy within 0.3 points of off at
50 rounds; on one GPU, the CNN in pfl's shape on >= 10x.

``--plain`` times issue 39's plain script instead, with none of mptrain around it: each 2NN
case's round of clients (random MNIST-shaped data) one after another with
``torch.optim.SGD``, and stacked with ``torch.func`` (``vmap(grad)``, one update for all),
in this process at ``--threads-per-worker`` threads (default 1), interleaved: what stacking
can gain at that shape on this CPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import machine_info, mnist_dir, result_path, run_measured, write_json

PYTHON = sys.executable
COMMON = ["--local-epochs", "1", "--batch-size", "10", "--lr", "0.1", "--optimizer", "sgd",
          "--momentum", "0", "--partition", "iid", "--seed", "0"]
#: name: (model, clients, per round, modes on CPU, modes on a GPU)
CASES = {
    "2nn-100x10": ("mnist-2nn", 100, 10, ("off", "on"), ("off", "on")),
    "2nn-1200x50": ("mnist-2nn", 1200, 50, ("off", "on"), ("off", "on")),
    "cnn-1200x50": ("mnist-cnn-fedavg", 1200, 50, ("off", "auto"), ("off", "on", "auto")),
    "cnn-100x10": ("mnist-cnn-fedavg", 100, 10, ("off", "auto"), ("off", "on", "auto")),
}
TARGETS = {("2nn-100x10", "on"): "CPU >= 1.4x", ("2nn-1200x50", "on"): "CPU >= 2.5x",
           ("cnn-1200x50", "auto"): "never < 0.95x", ("cnn-100x10", "auto"): "never < 0.95x",
           ("cnn-1200x50", "on"): "GPU >= 10x", ("cnn-100x10", "on"): "GPU >= 3x"}


def run_case(case: str, mode: str, args, data_dir: Path) -> dict:
    model, clients, per_round, _, _ = CASES[case]
    with tempfile.TemporaryDirectory(prefix="flvec-") as out:
        command = [PYTHON, "-m", "mptrain", "run", "--data", "mnist", "--data-dir",
                   str(data_dir), "--strategy", "fedavg", "--model", model,
                   "--clients", str(clients), "--clients-per-round", str(per_round),
                   "--rounds", str(args.rounds), "--eval-every", str(args.rounds),
                   "--workers", str(args.workers), "--device", args.device,
                   "--vectorize-clients", mode, "--quiet", "--out", out, *COMMON]
        if args.threads_per_worker is not None:
            command += ["--threads-per-worker", str(args.threads_per_worker)]
        if args.vectorize_chunk is not None and mode != "off":
            command += ["--vectorize-chunk", str(args.vectorize_chunk)]
        measured = run_measured(command, timeout_s=args.timeout, sample_memory=False)
        if measured["returncode"] != 0:
            tail = measured["output"].strip().splitlines()[-1:] or ["(no output)"]
            return {"ok": False, "error": tail[0], "command": command}
        summary = json.loads((Path(out) / "summary.json").read_text())
        rows = [json.loads(line) for line in (Path(out) / "metrics.jsonl").open()]
    round_s = [r.get("round_s") for r in rows]
    later = round_s[1:] or round_s
    return {"ok": True, "command": command, "wall_s": measured["wall_s"],
            "round_s": round_s, "threads_per_worker": summary.get("threads_per_worker"), "s_per_round": statistics.median(later),
            "first_round_s": round_s[0] if round_s else None,
            "accuracy": summary.get("test_accuracy"),
            "client_path": summary.get("client_path"),
            "gpu_peak_bytes": summary.get("gpu_peak_bytes")}


def plain_round_times(case: str, threads: int, repeats: int) -> dict:
    """Issue 39's plain script at ``case``'s shape: seconds per round one client after
    another and stacked, ``repeats`` interleaved pairs (module doc)."""
    import torch
    import torch.nn.functional as F
    from torch.func import functional_call, grad_and_value, vmap

    from mptrain.models.nets import Mnist2NN

    torch.set_num_threads(threads)
    _, clients, per_round, _, _ = CASES[case]
    samples, batch = 60_000 // clients, 10
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(per_round, samples, 1, 28, 28, generator=generator)
    targets = torch.randint(0, 10, (per_round, samples), generator=generator)
    model, lone = Mnist2NN(), Mnist2NN()
    optimizer = torch.optim.SGD(lone.parameters(), lr=0.1)

    def one_after_another():
        for k in range(per_round):
            lone.load_state_dict(model.state_dict())
            for s in range(0, samples, batch):
                optimizer.zero_grad()
                F.cross_entropy(lone(inputs[k, s:s + batch]), targets[k, s:s + batch]).backward()
                optimizer.step()

    def loss(params, x, y):
        return F.cross_entropy(functional_call(model, params, (x,)), y)

    gradients = vmap(grad_and_value(loss))

    def stacked():
        params = {n: p.detach().unsqueeze(0).repeat(per_round, *[1] * p.dim())
                  for n, p in model.named_parameters()}
        for s in range(0, samples, batch):
            grads, _ = gradients(params, inputs[:, s:s + batch], targets[:, s:s + batch])
            with torch.no_grad():
                torch._foreach_add_(list(params.values()), list(grads.values()), alpha=-0.1)

    times = {"one_after_another": [], "stacked": []}
    one_after_another(), stacked()   # warm
    for _ in range(repeats):
        for name, train in (("one_after_another", one_after_another), ("stacked", stacked)):
            started = time.perf_counter()
            train()
            times[name].append(time.perf_counter() - started)
    ratios = [a / b for a, b in zip(times["one_after_another"], times["stacked"])]
    return {"case": case, "threads": threads, "times": times,
            "one_after_another_s": statistics.median(times["one_after_another"]),
            "stacked_s": statistics.median(times["stacked"]),
            "ratio_median": statistics.median(ratios), "ratio_min": min(ratios),
            "ratio_max": max(ratios)}


def plain(args, cases: list[str]) -> int:
    threads = args.threads_per_worker or 1
    repeats = args.repeats if args.repeats > 1 else 15
    print(f"issue 39's plain script on {device_name('cpu')}, {threads} thread(s), "
          f"{repeats} interleaved pairs (s per round; ratio per pair, median (min-max))")
    rows = []
    for case in cases:
        if CASES[case][0] != "mnist-2nn":
            continue
        row = plain_round_times(case, threads, repeats)
        rows.append(row)
        print(f"  {case:<12} one after another {row['one_after_another_s']:.4f}  stacked "
              f"{row['stacked_s']:.4f}  x{row['ratio_median']:.2f} "
              f"({row['ratio_min']:.2f}-{row['ratio_max']:.2f})", flush=True)
    path = result_path("fl_vectorized_plain", args.json)
    if path is not None:
        write_json(path, {"machine": machine_info(), "threads": threads, "repeats": repeats,
                          "rows": rows})
        print(f"\nwritten to {path}")
    return 0


def device_name(device: str) -> str:
    import torch

    if device == "cuda":
        return torch.cuda.get_device_name(0)
    import os
    import platform

    return f"CPU {platform.processor() or platform.machine()}, " \
        f"{len(os.sched_getaffinity(0))} usable cores"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--threads-per-worker", type=int,
                        help="default: mptrain's (usable cores // workers)")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--vectorize-chunk", type=int,
                        help="clients per cohort for on/auto (default: mptrain's rule)")
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument("--quick", action="store_true", help="5 rounds: a smoke run")
    parser.add_argument("--plain", action="store_true",
                        help="time issue 39's plain script at the 2NN cases' shapes instead")
    parser.add_argument("--json", default="auto")
    args = parser.parse_args()
    if args.quick:
        args.rounds = 5
    cases = [c for c in args.cases.split(",") if c]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(CASES)}")
    if args.plain:
        return plain(args, cases)
    data_dir = mnist_dir(args.data_dir)
    name = device_name(args.device)
    print(f"fedavg clients one at a time vs stacked on {name}, --workers {args.workers}, "
          f"{args.rounds} rounds, {args.repeats} repeat(s)", flush=True)
    results = {}
    for case in cases:
        modes = CASES[case][4 if args.device == "cuda" else 3]
        for repeat in range(args.repeats):
            for mode in modes:   # interleaved: drift of a loaded machine hits both
                run = run_case(case, mode, args, data_dir)
                results.setdefault(case, {}).setdefault(mode, []).append(run)
                what = f"{run['s_per_round']:.3f} s/round, acc {run['accuracy']:.4f}, " \
                    f"{run['client_path']}" if run["ok"] else f"failed: {run['error']}"
                print(f"  {case} {mode} #{repeat + 1}: {what}", flush=True)
    print()
    print(f"{'case':<13} {'mode':<5} {'s/round':>8} {'x off':>6} {'acc':>7} {'d acc':>7} "
          f"{'target':<15} path")
    table = []
    for case, by_mode in results.items():
        offs = by_mode.get("off", [])
        for mode, runs in by_mode.items():
            ok = [r for r in runs if r["ok"]]
            if not ok:
                print(f"{case:<13} {mode:<5} failed: {runs[0]['error']}")
                continue
            s = statistics.median(r["s_per_round"] for r in ok)
            ratios = [o["s_per_round"] / r["s_per_round"] for o, r in zip(offs, runs)
                      if o["ok"] and r["ok"]]
            ratio = statistics.median(ratios) if ratios else None
            accuracy = statistics.median(r["accuracy"] for r in ok)
            off_accuracy = statistics.median(o["accuracy"] for o in offs if o["ok"]) \
                if any(o["ok"] for o in offs) else None
            delta = None if off_accuracy is None else 100 * (accuracy - off_accuracy)
            row = {"case": case, "mode": mode, "s_per_round": s, "x_off": ratio,
                   "accuracy": accuracy, "accuracy_points_vs_off": delta,
                   "target": TARGETS.get((case, mode)), "client_path": ok[0]["client_path"],
                   "gpu_peak_bytes": ok[0]["gpu_peak_bytes"]}
            table.append(row)
            peak = row["gpu_peak_bytes"]
            memory = f" (GPU peak {peak / 2**20:,.0f} MiB)" if peak else ""
            print(f"{case:<13} {mode:<5} {s:>8.3f} "
                  f"{'-' if ratio is None else f'{ratio:.2f}':>6} {accuracy:>7.4f} "
                  f"{'-' if delta is None else f'{delta:+.2f}':>7} "
                  f"{row['target'] or '':<15} {row['client_path']}{memory}")
    path = result_path("fl_vectorized", args.json)
    if path is not None:
        write_json(path, {"machine": machine_info(), "device": args.device,
                          "device_name": name, "workers": args.workers,
                          "threads_per_worker": args.threads_per_worker,
                          "vectorize_chunk": args.vectorize_chunk,
                          "rounds": args.rounds, "repeats": args.repeats, "table": table,
                          "runs": results})
        print(f"\nwritten to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
