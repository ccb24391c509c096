"""fedavg's clients one at a time (``--vectorize-clients off``) against stacked (``on``) and
``auto``'s pick, side by side in one sitting, at one and two workers, on issue 39's
workloads and LEAF's Shakespeare shape.

    python benchmarks/fl_vectorized.py [--data-dir DIR] [--device cpu|cuda] [--rounds 50]
        [--workers 1,2] [--threads-per-worker N] [--cases 2nn-100x10,...,lstm-shakespeare]
        [--clients-per-round N]
        [--repeats 1] [--vectorize-chunk N] [--quick] [--json auto]
    python benchmarks/fl_vectorized.py --plain [--threads-per-worker N] [--repeats 15]

IID clients for MNIST, client SGD lr 0.1 without momentum, B=10, E=1, seed 0; the test set
evaluated after the last round only (so a round's time is its training and the server
step). Every case runs at each ``--workers`` count (default 1 and 2: on a 2-core machine
two workers get one thread each, and each trains half a round's clients -- what decides
``auto``, ``federated.cohorts.choice``). Cases:

  2nn-100x10   McMahan 2NN, 100 clients of 600 samples, 10 per round: off, on, auto
  2nn-1200x50  McMahan 2NN, 1,200 clients of 50 samples, 50 per round (pfl-research's
               benchmark shape): off, on, auto
  cnn-1200x50  McMahan CNN, the same shape: off, auto (and on, on a GPU)
  cnn-100x10   McMahan CNN, 100 clients, 10 per round: off, auto (and on, on a GPU)
  lstm-shakespeare  LEAF's Shakespeare LSTM on a LEAF folder of Shakespeare's shape written
               here (no download): 100 speaking roles of 200 80-character lines (random
               letters of LEAF's 80), 10 per round; at most 4 rounds (a round is seconds):
               off, on, auto

``--clients-per-round N`` replaces each case's count: with ``--workers 1
--threads-per-worker 1`` it sweeps one worker's share at one thread, the worst case for
stacking, where ``choice.MIN_COHORT_CPU`` is set from (the smallest share ``on`` beats
``off`` at, with a margin).

s/round is the median of every round but the first (which pays for start-up: the first
stacked call, the data's first touch); "x off" is off's s/round over the mode's, of the
same repeat; for ``auto`` the table says which path it took and whether that path was
the faster of off and on as measured here ("auto ok"), the check issue 50 asks for.
Accuracy is the test accuracy after the last round. Issue 39's targets are printed beside
the figures: on a 2-core CPU, 2nn-100x10 on >= 1.4x, 2nn-1200x50 on >= 2.5x, the CNN with
auto never more than 5% slower than off, accuracy within 0.3 points of off at 50 rounds; on
one GPU, the CNN in pfl's shape on >= 10x.

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
          "--momentum", "0", "--seed", "0"]
#: name: (model, clients, per round, modes on CPU, modes on a GPU); clients None: the LEAF
#: folder's own (one per role)
CASES = {
    "2nn-100x10": ("mnist-2nn", 100, 10, ("off", "on", "auto"), ("off", "on", "auto")),
    "2nn-1200x50": ("mnist-2nn", 1200, 50, ("off", "on", "auto"), ("off", "on", "auto")),
    "cnn-1200x50": ("mnist-cnn-fedavg", 1200, 50, ("off", "auto"), ("off", "on", "auto")),
    "cnn-100x10": ("mnist-cnn-fedavg", 100, 10, ("off", "auto"), ("off", "on", "auto")),
    "lstm-shakespeare": ("leaf-shakespeare-lstm", None, 10, ("off", "on", "auto"),
                         ("off", "on", "auto")),
}
#: The Shakespeare case's folder: roles, lines a role (train; a tenth as many to test),
#: and its rounds at most (a stacked round of 10 clients of 20 steps is tens of seconds on
#: a CPU).
SHAKESPEARE_ROLES, SHAKESPEARE_LINES, SHAKESPEARE_ROUNDS = 100, 200, 4
LEAF_LETTERS = ("\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]"
                "abcdefghijklmnopqrstuvwxyz}")
TARGETS = {("2nn-100x10", "on"): "CPU >= 1.4x", ("2nn-1200x50", "on"): "CPU >= 2.5x",
           ("cnn-1200x50", "auto"): "never < 0.95x", ("cnn-100x10", "auto"): "never < 0.95x",
           ("cnn-1200x50", "on"): "GPU >= 10x", ("cnn-100x10", "on"): "GPU >= 3x"}


def write_shakespeare(root: Path, roles: int = SHAKESPEARE_ROLES,
                      lines: int = SHAKESPEARE_LINES) -> Path:
    """A LEAF Shakespeare folder (``--data leaf:DIR``): one train and one test file, each
    role's 80-character lines and next characters, random letters of LEAF's vocabulary
    (the shape is what a round's time depends on, not the text)."""
    import random

    rng = random.Random(0)
    for split, count in (("train", lines), ("test", max(1, lines // 10))):
        users = {}
        for role in range(roles):
            text = ["".join(rng.choices(LEAF_LETTERS, k=81)) for _ in range(count)]
            users[f"role_{role:04d}"] = {"x": [t[:80] for t in text],
                                         "y": [t[80] for t in text]}
        folder = root / split
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"all_data_{split}.json").write_text(json.dumps(
            {"users": list(users), "num_samples": [count] * roles, "user_data": users}))
    return root


def run_case(case: str, mode: str, workers: int, args, data: dict) -> dict:
    model, clients, per_round, _, _ = CASES[case]
    per_round = args.clients_per_round or per_round
    rounds = args.rounds if clients is not None else min(args.rounds, SHAKESPEARE_ROUNDS)
    if clients is None:
        source = ["--data", f"leaf:{data['shakespeare']}"]
    else:
        source = ["--data", "mnist", "--data-dir", str(data["mnist"]), "--partition", "iid",
                  "--clients", str(clients)]
    with tempfile.TemporaryDirectory(prefix="flvec-") as out:
        command = [PYTHON, "-m", "mptrain", "run", *source, "--strategy", "fedavg",
                   "--model", model, "--clients-per-round", str(per_round),
                   "--rounds", str(rounds), "--eval-every", str(rounds),
                   "--workers", str(workers), "--device", args.device,
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
    parser.add_argument("--workers", default="1,2",
                        help="worker counts, comma-separated; every case runs at each")
    parser.add_argument("--threads-per-worker", type=int,
                        help="default: mptrain's (usable cores // workers)")
    parser.add_argument("--clients-per-round", type=int,
                        help="instead of each case's own: sweep a worker's share (auto's "
                             "MIN_COHORT_CPU) at one thread")
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
    try:
        worker_counts = [int(w) for w in args.workers.split(",") if w]
    except ValueError:
        parser.error(f"--workers {args.workers!r}: give counts like 1,2")
    if args.plain:
        return plain(args, cases)
    name = device_name(args.device)
    print(f"fedavg clients one at a time vs stacked on {name}, --workers "
          f"{','.join(map(str, worker_counts))}, {args.rounds} rounds, {args.repeats} "
          "repeat(s)", flush=True)
    with tempfile.TemporaryDirectory(prefix="flvec-leaf-") as leaf:
        data = {"mnist": None, "shakespeare": None}
        if any(CASES[c][1] is not None for c in cases):
            data["mnist"] = mnist_dir(args.data_dir)
        if any(CASES[c][1] is None for c in cases):
            data["shakespeare"] = write_shakespeare(Path(leaf))
        results = measure(cases, worker_counts, args, data)
    table = summarise(results)
    path = result_path("fl_vectorized", args.json)
    if path is not None:
        write_json(path, {"machine": machine_info(), "device": args.device,
                          "device_name": name, "workers": worker_counts,
                          "threads_per_worker": args.threads_per_worker,
                          "clients_per_round": args.clients_per_round,
                          "vectorize_chunk": args.vectorize_chunk,
                          "rounds": args.rounds, "repeats": args.repeats, "table": table,
                          "runs": {f"{case} x{w}": by_mode
                                   for (case, w), by_mode in results.items()}})
        print(f"\nwritten to {path}")
    return 0


def measure(cases, worker_counts, args, data) -> dict:
    """{(case, workers): {mode: [run, ...]}}, modes interleaved within a repeat."""
    results = {}
    for case in cases:
        modes = CASES[case][4 if args.device == "cuda" else 3]
        for workers in worker_counts:
            for repeat in range(args.repeats):
                for mode in modes:   # interleaved: drift of a loaded machine hits each
                    run = run_case(case, mode, workers, args, data)
                    results.setdefault((case, workers), {}).setdefault(mode, []).append(run)
                    what = f"{run['s_per_round']:.3f} s/round, acc {run['accuracy']:.4f}, " \
                        f"{run['client_path']}" if run["ok"] else f"failed: {run['error']}"
                    print(f"  {case} x{workers} {mode} #{repeat + 1}: {what}", flush=True)
    return results


def summarise(results: dict) -> list[dict]:
    """The table (printed) and its rows: per case, worker count and mode, s/round, x off,
    accuracy; for auto, the path it took and whether that was the faster one measured."""
    print()
    print(f"{'case':<17} {'workers':>7} {'mode':<5} {'s/round':>8} {'x off':>6} {'acc':>7} "
          f"{'d acc':>7} {'target':<15} path")
    table = []
    for (case, workers), by_mode in results.items():
        offs = by_mode.get("off", [])
        medians = {mode: statistics.median(r["s_per_round"] for r in runs if r["ok"])
                   for mode, runs in by_mode.items() if any(r["ok"] for r in runs)}
        for mode, runs in by_mode.items():
            ok = [r for r in runs if r["ok"]]
            if not ok:
                print(f"{case:<17} {workers:>7} {mode:<5} failed: {runs[0]['error']}")
                continue
            s = medians[mode]
            ratios = [o["s_per_round"] / r["s_per_round"] for o, r in zip(offs, runs)
                      if o["ok"] and r["ok"]]
            ratio = statistics.median(ratios) if ratios else None
            accuracy = statistics.median(r["accuracy"] for r in ok)
            off_accuracy = statistics.median(o["accuracy"] for o in offs if o["ok"]) \
                if any(o["ok"] for o in offs) else None
            delta = None if off_accuracy is None else 100 * (accuracy - off_accuracy)
            row = {"case": case, "workers": workers, "mode": mode, "s_per_round": s,
                   "x_off": ratio, "accuracy": accuracy, "accuracy_points_vs_off": delta,
                   "target": TARGETS.get((case, mode)), "client_path": ok[0]["client_path"],
                   "gpu_peak_bytes": ok[0]["gpu_peak_bytes"]}
            verdict = ""
            if mode == "auto" and "off" in medians and "on" in medians:
                took = "on" if str(row["client_path"]).startswith("vectorized") else "off"
                faster = "on" if medians["on"] < medians["off"] else "off"
                row["auto_took"], row["faster_measured"] = took, faster
                row["auto_ok"] = took == faster
                verdict = f"  [auto took {took}; {faster} measured faster: " \
                    f"{'ok' if took == faster else 'WRONG'}]"
            table.append(row)
            peak = row["gpu_peak_bytes"]
            memory = f" (GPU peak {peak / 2**20:,.0f} MiB)" if peak else ""
            print(f"{case:<17} {workers:>7} {mode:<5} {s:>8.3f} "
                  f"{'-' if ratio is None else f'{ratio:.2f}':>6} {accuracy:>7.4f} "
                  f"{'-' if delta is None else f'{delta:+.2f}':>7} "
                  f"{row['target'] or '':<15} {row['client_path']}{memory}{verdict}")
    return table


if __name__ == "__main__":
    sys.exit(main())
