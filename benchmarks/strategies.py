"""Throughput, scaling efficiency, start-up, page faults and whole-tree memory of mptrain's
strategies on MNIST, against a plain single-process PyTorch loop, in one sitting.

    python benchmarks/strategies.py --data-dir ../shared/data/mnist [--repeats 5]
        [--accuracy] [--json auto]

Each repeat runs every case once, in the same order (A B C A B C ...), so drift of a noisy
machine hits all cases alike; figures are medians with min-max. Efficiency is samples/s
divided by (2 x the faster single-thread single-process figure: plain loop or mptrain
``single``). Memory is the peak PSS of the whole process tree (see ``common``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from common import (machine_info, mnist_dir, result_path, run_measured, summarize,
                    write_json)

PYTHON = sys.executable
# The efficiency reference: the faster of these two single-thread, single-process cases.
REFERENCE_CASES = ("plain loop (1 thread)", "mptrain single (1 thread)")


def mptrain_case(name, data_dir, strategy, workers, epochs, batch_size, threads=1,
                 extra=()):
    def command(out):
        return [PYTHON, "-m", "mptrain", "run", "--data", "mnist", "--data-dir", str(data_dir),
                "--strategy", strategy, "--epochs", str(epochs), "--batch-size",
                str(batch_size), "--threads-per-worker", str(threads), "--quiet",
                "--out", str(out)] + (["--workers", str(workers)] if strategy != "single"
                                      else []) + list(extra)

    def parse(out, measured):
        summary = json.loads((Path(out) / "summary.json").read_text())
        metrics = [json.loads(line) for line in
                   (Path(out) / "metrics.jsonl").read_text().splitlines()]
        return {"samples_per_s": summary["train_samples_per_s"],
                "first_step_s": summary["process_start_to_first_step_s"],
                "accuracy": [m["test_accuracy"] for m in metrics],
                "minor_faults_per_epoch": metrics[-1]["minor_faults"]}

    return {"name": name, "strategy": strategy, "workers": workers, "command": command,
            "parse": parse}


def plain_case(data_dir, epochs, batch_size):
    script = Path(__file__).with_name("plain_loop.py")

    def command(out):
        return [PYTHON, str(script), "--data-dir", str(data_dir), "--threads", "1",
                "--epochs", str(epochs), "--batch-size", str(batch_size),
                "--json", str(Path(out) / "plain.json")]

    def parse(out, measured):
        data = json.loads((Path(out) / "plain.json").read_text())
        return {"samples_per_s": data["samples_per_s"],
                "first_step_s": data["process_start_to_first_step_s"],
                "accuracy": [e["test_accuracy"] for e in data["epochs"]],
                "minor_faults_per_epoch": None}

    return {"name": "plain loop (1 thread)", "strategy": "plain", "workers": 1,
            "command": command, "parse": parse}


def run_cases(cases, repeats, sample_memory=True):
    results = {case["name"]: [] for case in cases}
    for repeat in range(repeats):
        for case in cases:
            with tempfile.TemporaryDirectory() as out:
                measured = run_measured(case["command"](out), sample_memory=sample_memory)
                if measured["returncode"] != 0:
                    print(f"  {case['name']}: FAILED\n{measured['output'][-2000:]}")
                    continue
                row = case["parse"](out, measured)
                row.update(repeat=repeat, wall_s=measured["wall_s"],
                           peak_pss_bytes=measured["peak_pss_bytes"],
                           peak_rss_bytes=measured["peak_rss_bytes"])
                results[case["name"]].append(row)
                print(f"  repeat {repeat + 1}/{repeats} {case['name']:<24} "
                      f"{row['samples_per_s']:>9,.0f} samples/s  first step "
                      f"{row['first_step_s']:.2f} s  PSS "
                      f"{(row['peak_pss_bytes'] or 0) / 2**20:,.0f} MiB",
                      flush=True)
    return results


def paired_references(results, names=REFERENCE_CASES) -> dict:
    """repeat -> the faster single-thread figure of that repeat."""
    by_repeat = {}
    for name in names:
        for run in results.get(name, []):
            by_repeat[run["repeat"]] = max(by_repeat.get(run["repeat"], 0), run["samples_per_s"])
    return by_repeat


def table(cases, results, reference, paired=None):
    """``paired``: repeat -> reference of that repeat. The machine drifts by 10-35% over
    minutes; a case and the reference of the same repeat ran seconds apart, so the median of
    the per-repeat ratios is less exposed to drift than the ratio of the two medians."""
    rows = []
    print(f"\n{'case':<26}{'samples/s':>12}{'(min-max)':>20}{'eff.':>7}{'paired eff.':>20}"
          f"{'1st step s':>11}{'PSS MiB':>9}{'faults/ep':>11}{'acc':>8}")
    for case in cases:
        runs = results[case["name"]]
        speed = summarize([r["samples_per_s"] for r in runs])
        first = summarize([r["first_step_s"] for r in runs])
        pss = summarize([r["peak_pss_bytes"] for r in runs])
        faults = summarize([r["minor_faults_per_epoch"] for r in runs])
        accuracy = summarize([r["accuracy"][-1] for r in runs])
        efficiency = speed["median"] / (2 * reference) if speed["median"] and reference else None
        pairs = summarize([r["samples_per_s"] / (2 * paired[r["repeat"]]) for r in runs
                           if paired and paired.get(r["repeat"])])
        row = {"case": case["name"], "strategy": case["strategy"], "workers": case["workers"],
               "samples_per_s": speed, "efficiency_vs_2_cores": efficiency,
               "paired_efficiency": pairs,
               "first_step_s": first, "peak_pss_bytes": pss, "minor_faults_per_epoch": faults,
               "final_accuracy": accuracy, "runs": runs}
        rows.append(row)
        if not runs:
            print(f"{case['name']:<26}{'failed':>12}")
            continue
        span = f"({speed['min']:,.0f}-{speed['max']:,.0f})"
        paired_text = (f"{pairs['median']:.2f} ({pairs['min']:.2f}-{pairs['max']:.2f})"
                       if pairs["n"] else "-")
        print(f"{case['name']:<26}{speed['median']:>12,.0f}{span:>20}"
              f"{efficiency if efficiency is not None else float('nan'):>7.2f}"
              f"{paired_text:>20}"
              f"{first['median']:>11.2f}{(pss['median'] or float('nan')) / 2**20:>9,.0f}"
              f"{faults['median'] if faults['median'] is not None else float('nan'):>11,.0f}"
              f"{100 * accuracy['median']:>7.2f}%")
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--accuracy", action="store_true",
                        help="also run sync/hogwild/ddp with 4 workers for 3 epochs on "
                             "mptrain's MNIST defaults and print per-epoch accuracy")
    parser.add_argument("--seeds", default="0",
                        help="comma-separated seeds for --accuracy (e.g. 0,1,2)")
    parser.add_argument("--json", default="auto",
                        help="where the figures go (auto: "
                             "benchmarks/results/strategies-DATE.json)")
    args = parser.parse_args()
    args.json = result_path("strategies", args.json)
    data_dir = mnist_dir(args.data_dir)
    e, b = args.epochs, args.batch_size

    print("throughput (1 epoch, 2 workers, 1 thread per worker):")
    speed_cases = [plain_case(data_dir, e, b),
                   mptrain_case("mptrain single (1 thread)", data_dir, "single", 1, e, b),
                   mptrain_case("hogwild x2", data_dir, "hogwild", 2, e, b),
                   mptrain_case("sync x2", data_dir, "sync", 2, e, b),
                   mptrain_case("ddp x2", data_dir, "ddp", 2, e, b)]
    # No memory sampling here: it slows the runs it measures (see common.run_measured).
    speed_results = run_cases(speed_cases, args.repeats, sample_memory=False)
    reference = max(summarize([r["samples_per_s"] for r in speed_results[name]])["median"] or 0
                    for name in REFERENCE_CASES)
    print(f"\nreference single-thread samples/s: {reference:,.0f} "
          f"(2-core limit {2 * reference:,.0f})")
    speed_rows = table(speed_cases, speed_results, reference,
                       paired=paired_references(speed_results))

    print("\nwhole-tree memory (sync, 1 / 2 / 4 workers; sampled, so slower):")
    # One thread each: every count then forks (no fork server in the tree), like for like.
    memory_cases = [mptrain_case(f"sync x{w} memory", data_dir, "sync", w, e, b, threads=1)
                    for w in (1, 2, 4)]
    memory_results = run_cases(memory_cases, max(1, args.repeats // 2))
    memory_rows = table(memory_cases, memory_results, reference)
    pss = [row["peak_pss_bytes"]["median"] for row in memory_rows]
    if all(pss):
        print(f"PSS 4 workers / 1 worker: {pss[2] / pss[0]:.3f}")

    accuracy_rows = []
    if args.accuracy:
        print("\naccuracy with mptrain's MNIST defaults, 4 workers, 3 epochs:")
        accuracy_cases = [mptrain_case(f"{s} x4 seed {seed}", data_dir, s, 4, 3, b,
                                       extra=("--seed", seed))
                          for seed in args.seeds.split(",") for s in ("sync", "hogwild", "ddp")]
        accuracy_results = run_cases(accuracy_cases, 1)
        for case in accuracy_cases:
            for run in accuracy_results[case["name"]]:
                print(f"  {case['name']:<20} accuracy per epoch: "
                      + " / ".join(f"{100 * a:.2f}%" for a in run["accuracy"]))
        accuracy_rows = table(accuracy_cases, accuracy_results, reference)

    write_json(args.json, {"machine": machine_info(), "epochs": e, "batch_size": b,
                           "repeats": args.repeats, "reference_samples_per_s": reference,
                           "throughput": speed_rows, "memory": memory_rows,
                           "accuracy": accuracy_rows})
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
