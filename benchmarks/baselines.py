"""mptrain against the code people write by hand or with other libraries, in one sitting:
the naive re-spawn-every-epoch synchronous SGD, the classic mnist_hogwild example, a plain
DDP loop, Lightning and Accelerate, each next to the matching mptrain run.

    python benchmarks/baselines.py [--data-dir DIR] [--repeats 3] [--quick]
        [--groups sync,ddp,hogwild] [--json auto]

Every case runs as a fresh command through ``common.run_measured``: wall time is the whole
command, start-up included, and memory is the peak PSS of its process tree. Each repeat
runs every case once in the same order (A B C A B C ...), so drift of a noisy machine hits
all cases alike; figures are medians with min-max. Ratios are mptrain's median wall time
over the baseline's (below 1: mptrain finishes first) and mptrain's training samples/s over
the baseline's (above 1: mptrain trains faster). Lightning and Accelerate rows are
"skipped" when those packages are absent (``pip install -e '.[baselines]'``).

Groups (all on MNIST, the classic MNIST CNN, batch 64):
  sync     4 workers, 3 epochs. Naive sync (SGD 0.01 momentum 0.5, averaged once per
           epoch, 4 processes started every epoch) with fork and spawn; mptrain sync with
           its MNIST defaults (Adam 0.006 halved every epoch, averaged every step) and
           "matched" with the naive loop's settings (SGD 0.01/0.5, averaged once per epoch).
  ddp      2 workers, 1 epoch, Adam 0.006 (mptrain's MNIST default) everywhere: mptrain ddp,
           plain DDP loop (spawn as in the tutorial, and fork), Lightning ddp and
           ddp_spawn, Accelerate through torchrun.
  hogwild  2 workers, 1 epoch, SGD 0.01 momentum 0.5, each process 1/2 of the data: the
           classic example as published (spawn, torch's default thread count) and with one
           thread per process; mptrain hogwild with one thread per worker.
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
BASELINES = Path(__file__).resolve().with_name("baselines")
SYNC_SETTINGS = ["--optimizer", "sgd", "--lr", "0.01", "--momentum", "0.5"]
ADAM_SETTINGS = ["--optimizer", "adam", "--lr", "0.006"]


def mptrain_case(name, group, data_dir, strategy, workers, epochs, extra=()):
    def command(out):
        return [PYTHON, "-m", "mptrain", "run", "--data", "mnist", "--data-dir", str(data_dir),
                "--strategy", strategy, "--workers", str(workers), "--epochs", str(epochs),
                "--batch-size", "64", "--threads-per-worker", str(max(1, 2 // workers)),
                "--start-method", "fork", "--quiet", "--out", str(out), *extra]

    def parse(out):
        summary = json.loads((Path(out) / "summary.json").read_text())
        metrics = [json.loads(line) for line in
                   (Path(out) / "metrics.jsonl").read_text().splitlines()]
        return {"samples_per_s": summary["train_samples_per_s"],
                "epoch_s": sum(m["epoch_s"] for m in metrics) / len(metrics),
                "first_step_s": summary["process_start_to_first_step_s"],
                "accuracy": [m["test_accuracy"] for m in metrics]}

    return {"name": name, "group": group, "kind": "mptrain", "command": command,
            "parse": parse}


def baseline_case(name, group, script, data_dir, arguments):
    def command(out):
        return [PYTHON, str(BASELINES / script), "--data-dir", str(data_dir), *arguments,
                "--json", str(Path(out) / "result.json")]

    def parse(out):
        path = Path(out) / "result.json"
        if not path.exists():
            return None  # the script skipped itself (its package is not installed)
        data = json.loads(path.read_text())
        accuracy = data["accuracy"] if isinstance(data["accuracy"], list) else [data["accuracy"]]
        epoch_s = data.get("epoch_s") or data["train_s"] / data["epochs"]
        return {"samples_per_s": data["samples_per_s"], "epoch_s": epoch_s,
                "first_step_s": data.get("process_start_to_first_step_s"),
                "accuracy": accuracy}

    return {"name": name, "group": group, "kind": "baseline", "command": command,
            "parse": parse}


def build_cases(data_dir, groups):
    cases = []
    if "sync" in groups:
        sync = ["--workers", "4", "--epochs", "3", *SYNC_SETTINGS]
        cases += [
            baseline_case("naive sync x4 fork", "sync", "naive_sync.py", data_dir,
                          sync + ["--start-method", "fork"]),
            baseline_case("naive sync x4 spawn", "sync", "naive_sync.py", data_dir,
                          sync + ["--start-method", "spawn"]),
            mptrain_case("mptrain sync x4", "sync", data_dir, "sync", 4, 3),
            mptrain_case("mptrain sync x4 matched", "sync", data_dir, "sync", 4, 3,
                         SYNC_SETTINGS + ["--lr-decay", "1", "--sync-every", "1000000"]),
        ]
    if "ddp" in groups:
        ddp = ["--workers", "2", "--epochs", "1", *ADAM_SETTINGS]
        cases += [
            mptrain_case("mptrain ddp x2", "ddp", data_dir, "ddp", 2, 1, ADAM_SETTINGS),
            baseline_case("plain DDP x2 spawn", "ddp", "plain_ddp.py", data_dir,
                          ddp + ["--start-method", "spawn"]),
            baseline_case("plain DDP x2 fork", "ddp", "plain_ddp.py", data_dir,
                          ddp + ["--start-method", "fork"]),
            baseline_case("Lightning ddp x2", "ddp", "lightning_ddp.py", data_dir,
                          ddp + ["--strategy", "ddp"]),
            baseline_case("Lightning ddp_spawn x2", "ddp", "lightning_ddp.py", data_dir,
                          ddp + ["--strategy", "ddp_spawn"]),
            baseline_case("Accelerate x2 (torchrun)", "ddp", "accelerate_run.py", data_dir,
                          ddp),
        ]
    if "hogwild" in groups:
        hogwild = ["--workers", "2", "--epochs", "1", "--shard"]
        cases += [
            baseline_case("classic hogwild x2 shard", "hogwild", "classic_hogwild.py",
                          data_dir, hogwild),
            baseline_case("classic hogwild x2 shard 1t", "hogwild", "classic_hogwild.py",
                          data_dir, hogwild + ["--threads", "1"]),
            mptrain_case("mptrain hogwild x2", "hogwild", data_dir, "hogwild", 2, 1,
                         SYNC_SETTINGS),
        ]
    return cases


# (mptrain case, baseline case): the comparisons the project tracks.
RATIOS = [
    ("mptrain sync x4", "naive sync x4 fork"),
    ("mptrain sync x4", "naive sync x4 spawn"),
    ("mptrain sync x4 matched", "naive sync x4 fork"),
    ("mptrain sync x4 matched", "naive sync x4 spawn"),
    ("mptrain ddp x2", "Lightning ddp x2"),
    ("mptrain ddp x2", "Lightning ddp_spawn x2"),
    ("mptrain ddp x2", "plain DDP x2 spawn"),
    ("mptrain ddp x2", "plain DDP x2 fork"),
    ("mptrain ddp x2", "Accelerate x2 (torchrun)"),
    ("mptrain hogwild x2", "classic hogwild x2 shard"),
    ("mptrain hogwild x2", "classic hogwild x2 shard 1t"),
]


def run_cases(cases, repeats, memory_repeats=1):
    """Timed repeats first, without memory sampling (reading every process's page tables
    five times a second costs a 2-core machine several percent, and more for trees with more
    processes), then ``memory_repeats`` sampled ones that give the PSS column only."""
    results = {case["name"]: {"runs": [], "skipped": False, "failures": 0} for case in cases}
    for repeat in range(repeats + memory_repeats):
        sampled = repeat >= repeats
        for case in cases:
            entry = results[case["name"]]
            if entry["skipped"]:
                continue
            with tempfile.TemporaryDirectory() as out:
                measured = run_measured(case["command"](out), sample_memory=sampled)
                row = case["parse"](out) if measured["returncode"] == 0 else None
            if measured["returncode"] == 0 and row is None:
                entry["skipped"] = True
                print(f"  {case['name']}: skipped ({measured['output'].strip()[-200:]})")
                continue
            if row is None:
                entry["failures"] += 1
                print(f"  {case['name']}: FAILED (exit {measured['returncode']})\n"
                      f"{measured['output'][-2000:]}")
                continue
            row.update(wall_s=measured["wall_s"], peak_pss_bytes=measured["peak_pss_bytes"],
                       peak_rss_bytes=measured["peak_rss_bytes"], memory_sampled=sampled)
            entry["runs"].append(row)
            label = "memory" if sampled else f"repeat {repeat + 1}/{repeats}"
            memory = f"  PSS {row['peak_pss_bytes'] / 2**20:,.0f} MiB" if sampled else ""
            print(f"  {label} {case['name']:<28} wall {row['wall_s']:6.1f} s"
                  f"  {row['samples_per_s']:>7,.0f} samples/s  acc {100 * row['accuracy'][-1]:.2f}%"
                  f"{memory}", flush=True)
    return results


def fmt(value, spec, scale=1.0):
    """``value * scale`` formatted with ``spec`` (">9.2f"), or a dash of the same width."""
    if value is None:
        return format("-", spec[:spec.index(".")].replace(",", "") if "." in spec else spec)
    return format(value * scale, spec)


def table(cases, results):
    rows = []
    print(f"\n{'case':<29}{'wall s':>8}{'(min-max)':>14}{'epoch s':>9}{'samples/s':>11}"
          f"{'1st step s':>11}{'acc %':>8}{'PSS MiB':>9}")
    for case in cases:
        entry = results[case["name"]]
        timed = [r for r in entry["runs"] if not r["memory_sampled"]]
        sampled = [r for r in entry["runs"] if r["memory_sampled"]]
        runs = timed or sampled
        wall = summarize([r["wall_s"] for r in runs])
        row = {"case": case["name"], "group": case["group"], "kind": case["kind"],
               "skipped": entry["skipped"], "failures": entry["failures"],
               "wall_s": wall, "epoch_s": summarize([r["epoch_s"] for r in runs]),
               "samples_per_s": summarize([r["samples_per_s"] for r in runs]),
               "first_step_s": summarize([r["first_step_s"] for r in runs]),
               "final_accuracy": summarize([r["accuracy"][-1] for r in runs]),
               "peak_pss_bytes": summarize([r["peak_pss_bytes"] for r in sampled]),
               "runs": entry["runs"]}
        rows.append(row)
        if not runs:
            print(f"{case['name']:<29}{'skipped' if entry['skipped'] else 'failed':>8}")
            continue
        spread = f"({wall['min']:.1f}-{wall['max']:.1f})"
        print(f"{case['name']:<29}{wall['median']:>8.1f}{spread:>14}"
              f"{fmt(row['epoch_s']['median'], '>9.2f')}"
              f"{fmt(row['samples_per_s']['median'], '>11,.0f')}"
              f"{fmt(row['first_step_s']['median'], '>11.2f')}"
              f"{fmt(row['final_accuracy']['median'], '>8.2f', 100)}"
              f"{fmt(row['peak_pss_bytes']['median'], '>9,.0f', 2**-20)}")
    return rows


def ratios(rows):
    by_name = {row["case"]: row for row in rows}
    found = []
    print(f"\n{'mptrain / baseline':<56}{'wall':>7}{'samples/s':>11}")
    for ours, theirs in RATIOS:
        if ours not in by_name or theirs not in by_name:
            continue
        a, b = by_name[ours], by_name[theirs]
        wall = (a["wall_s"]["median"] / b["wall_s"]["median"]
                if a["wall_s"]["median"] and b["wall_s"]["median"] else None)
        speed = (a["samples_per_s"]["median"] / b["samples_per_s"]["median"]
                 if a["samples_per_s"]["median"] and b["samples_per_s"]["median"] else None)
        found.append({"mptrain": ours, "baseline": theirs, "wall_ratio": wall,
                      "samples_per_s_ratio": speed})
        print(f"{ours + ' / ' + theirs:<56}{fmt(wall, '>7.2f')}{fmt(speed, '>11.2f')}")
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one repeat")
    parser.add_argument("--groups", default="sync,ddp,hogwild",
                        help="comma-separated subset of sync, ddp, hogwild")
    parser.add_argument("--memory-repeats", type=int, default=1,
                        help="extra runs per case with memory sampling, for the PSS column "
                             "only (0: no PSS)")
    parser.add_argument("--json", default="auto",
                        help="where the figures go (auto: "
                             "benchmarks/results/baselines-DATE.json)")
    args = parser.parse_args()
    args.json = result_path("baselines", args.json)
    repeats = 1 if args.quick else args.repeats
    groups = {g.strip() for g in args.groups.split(",") if g.strip()}
    unknown = groups - {"sync", "ddp", "hogwild"}
    if unknown:
        parser.error(f"unknown group(s): {', '.join(sorted(unknown))}")
    data_dir = mnist_dir(args.data_dir)

    cases = build_cases(data_dir, groups)
    print(f"{len(cases)} cases, {repeats} repeat(s):")
    rows = table(cases, run_cases(cases, repeats, args.memory_repeats))
    found = ratios(rows)
    write_json(args.json, {"machine": machine_info(), "repeats": repeats,
                           "groups": sorted(groups), "rows": rows, "ratios": found})
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
