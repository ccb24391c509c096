"""mptrain fedavg against the plain sequential FedAvg loop (and Flower, when installed), in
one sitting, on the workloads of issue 9.

    python benchmarks/fedavg.py [--data-dir DIR] [--repeats 3] [--memory-repeats 1] [--quick]
        [--workers 2[,4...]] [--groups reference,c1000x10,c1000x100,c10000]
        [--kinds plain,mptrain,flower] [--flower-python PYTHON] [--seed 0]
        [--json auto]

Every case runs as a fresh command through ``common.run_measured``: wall time is the whole
command, start-up included. The timed repeats run every case once in the same order
(A B C A B C ...) without memory sampling; then ``--memory-repeats`` more runs per case
sample the peak PSS of the process tree, for the PSS column only (sampling page tables at
5 Hz slows the run it measures). Figures are medians with min-max. "x plain" is the median
of paired ratios: each run against the plain loop's run of the same repeat, seconds apart,
so drift of a noisy machine cancels. A case that fails is reported in one line and not run
again; the others go on.

Groups (MNIST, the classic MNIST CNN, IID clients, 1 local epoch, batch 32, SGD lr 0.05
without momentum, server evaluation on the 10k test set every round):
  reference  100 clients x 600 samples, 10 per round, 20 rounds: plain loop, mptrain
             fedavg with each --workers count, Flower (skipped when flwr is absent).
  c1000x10   1,000 clients x 60 samples, 10 per round, 10 rounds: plain loop, mptrain.
  c1000x100  1,000 clients x 60 samples, 100 per round, 10 rounds: plain loop, mptrain.
  c10000     10,000 clients x 6 samples, 10 per round, 10 rounds: mptrain only; its PSS
             is compared with the reference mptrain run of the same worker count.

Targets (issue 9) are printed next to the figures: accuracy within 0.5 point of the plain
loop, mptrain 2 workers wall <= 0.5x the plain loop and PSS <= 1.2x on the reference
workload, wall <= 0.5x on both 1,000-client workloads, PSS of 10,000 clients within 1.1x of
the 100-client run.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
import tempfile
from pathlib import Path

from common import (machine_info, mnist_dir, result_path, run_measured, summarize,
                    write_json)

PYTHON = sys.executable
BASELINES = Path(__file__).resolve().with_name("baselines")
GROUPS = ("reference", "c1000x10", "c1000x100", "c10000")
KINDS = ("plain", "mptrain", "flower")
# (clients, clients per round, rounds) of each group.
WORKLOADS = {"reference": (100, 10, 20), "c1000x10": (1000, 10, 10),
             "c1000x100": (1000, 100, 10), "c10000": (10000, 10, 10)}
COMMON = {"local_epochs": 1, "batch_size": 32, "lr": 0.05}


def workload_flags(group):
    clients, per_round, rounds = WORKLOADS[group]
    return ["--clients", str(clients), "--clients-per-round", str(per_round),
            "--rounds", str(rounds), "--local-epochs", str(COMMON["local_epochs"]),
            "--batch-size", str(COMMON["batch_size"]), "--lr", str(COMMON["lr"])]


def mptrain_case(group, data_dir, workers, seed, extra):
    def command(out):
        return [PYTHON, "-m", "mptrain", "run", "--data", "mnist", "--data-dir", str(data_dir),
                "--model", "mnist-cnn", "--strategy", "fedavg", *workload_flags(group),
                "--optimizer", "sgd", "--momentum", "0", "--workers", str(workers),
                "--partition", "iid", "--seed", str(seed), "--quiet", "--out", str(out),
                *extra]

    def parse(out):
        summary = json.loads((Path(out) / "summary.json").read_text())
        metrics = [json.loads(line) for line in
                   (Path(out) / "metrics.jsonl").read_text().splitlines() if line.strip()]
        accuracy = [m["test_accuracy"] for m in metrics if m.get("test_accuracy") is not None]
        return {"accuracy": accuracy,
                "final_accuracy": summary.get("test_accuracy", accuracy[-1] if accuracy else None),
                "first_round_s": summary.get("first_round_s"),
                "rounds": len(metrics)}

    return {"name": f"mptrain fedavg x{workers} {group}", "group": group, "kind": "mptrain",
            "workers": workers, "command": command, "parse": parse}


def script_case(kind, group, script, python, data_dir, seed):
    def command(out):
        return [python, str(BASELINES / script), "--data-dir", str(data_dir),
                *workload_flags(group), "--seed", str(seed),
                "--json", str(Path(out) / "result.json")]

    def parse(out):
        path = Path(out) / "result.json"
        if not path.exists():
            return None  # the script skipped itself (its package is not installed)
        data = json.loads(path.read_text())
        return {"accuracy": data["accuracy"], "final_accuracy": data["final_accuracy"],
                "first_round_s": data.get("first_round_s"), "rounds": len(data["accuracy"])}

    label = {"plain": "plain loop", "flower": "Flower"}[kind]
    return {"name": f"{label} {group}", "group": group, "kind": kind, "workers": None,
            "command": command, "parse": parse}


def build_cases(data_dir, groups, kinds, workers, seed, flower_python, extra):
    cases = []
    for group in GROUPS:
        if group not in groups:
            continue
        if "plain" in kinds and group != "c10000":
            cases.append(script_case("plain", group, "plain_fedavg.py", PYTHON, data_dir, seed))
        if "mptrain" in kinds:
            cases += [mptrain_case(group, data_dir, w, seed, extra) for w in workers]
        if "flower" in kinds and group == "reference":
            cases.append(script_case("flower", group, "flower_fedavg.py", flower_python,
                                     data_dir, seed))
    return cases


def last_line(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"


def run_cases(cases, repeats, memory_repeats):
    """Timed repeats first, unsampled, then ``memory_repeats`` sampled runs per case."""
    results = {case["name"]: {"runs": [], "state": "ok", "error": None} for case in cases}
    for repeat in range(repeats + memory_repeats):
        sampled = repeat >= repeats
        for case in cases:
            entry = results[case["name"]]
            if entry["state"] != "ok":
                continue
            with tempfile.TemporaryDirectory() as out:
                measured = run_measured(case["command"](out), timeout_s=1800,
                                        sample_memory=sampled)
                row = None
                if measured["returncode"] == 0:
                    try:
                        row = case["parse"](out)
                    except (OSError, ValueError, KeyError, IndexError) as error:
                        measured["output"] += f"\ncould not read the results: {error!r}"
                        measured["returncode"] = "unreadable"
                    else:
                        if row is None:
                            entry["state"] = "skipped"
                            print(f"  {case['name']}: skipped ({last_line(measured['output'])})")
                            continue
            if row is None:
                # A deterministic failure (unknown option, crash) would repeat: run it no more.
                entry.update(state="failed", error=last_line(measured["output"]),
                             output_tail=measured["output"][-4000:])
                print(f"  {case['name']}: FAILED (exit {measured['returncode']}): "
                      f"{entry['error']}", flush=True)
                continue
            row.update(repeat=repeat, memory_sampled=sampled, wall_s=measured["wall_s"],
                       peak_pss_bytes=measured["peak_pss_bytes"],
                       peak_rss_bytes=measured["peak_rss_bytes"])
            entry["runs"].append(row)
            label = "memory" if sampled else f"repeat {repeat + 1}/{repeats}"
            memory = f"  PSS {row['peak_pss_bytes'] / 2**20:,.0f} MiB" if sampled else ""
            accuracy = (f"{100 * row['final_accuracy']:.2f}%"
                        if row["final_accuracy"] is not None else "-")
            print(f"  {label:<12} {case['name']:<34} wall {row['wall_s']:6.1f} s"
                  f"  acc {accuracy}{memory}", flush=True)
    return results


def paired_ratio(runs, reference_runs, key):
    """Median (min, max) of run[key] / reference[key] over runs of the same repeat."""
    by_repeat = {r["repeat"]: r for r in reference_runs}
    ratios = [r[key] / by_repeat[r["repeat"]][key] for r in runs
              if r["repeat"] in by_repeat and r[key] and by_repeat[r["repeat"]][key]]
    return summarize(ratios)


def fmt(value, spec, scale=1.0):
    """``value * scale`` formatted with ``spec`` (">9.2f"), or a dash of the same width."""
    if value is None:
        return format("-", f">{re.search(r'[0-9]+', spec).group()}")
    return format(value * scale, spec)


def reference_for(case, by_name):
    """The case a row's ratios are taken against: the plain loop of its group; for 10,000
    clients (no plain run) the reference mptrain run with the same workers, PSS only."""
    if case["group"] == "c10000":
        return by_name.get(f"mptrain fedavg x{case['workers']} reference")
    if case["kind"] == "plain":
        return None
    return by_name.get(f"plain loop {case['group']}")


def table(cases, results):
    by_name = {case["name"]: {"case": case, **results[case["name"]]} for case in cases}
    print(f"\n{'case':<34}{'wall s':>8}{'(min-max)':>14}{'x plain':>8}{'(min-max)':>13}"
          f"{'1st rnd s':>10}{'acc %':>8}{'d pt':>7}{'PSS MiB':>9}{'x ref':>7}")
    rows = []
    for case in cases:
        entry = results[case["name"]]
        timed = [r for r in entry["runs"] if not r["memory_sampled"]]
        sampled = [r for r in entry["runs"] if r["memory_sampled"]]
        runs = timed or sampled
        reference = reference_for(case, by_name)
        ref_timed = [r for r in reference["runs"] if not r["memory_sampled"]] if reference else []
        ref_sampled = [r for r in reference["runs"] if r["memory_sampled"]] if reference else []
        row = {"case": case["name"], "group": case["group"], "kind": case["kind"],
               "workers": case["workers"], "state": entry["state"], "error": entry["error"],
               "reference": reference["case"]["name"] if reference else None,
               "wall_s": summarize([r["wall_s"] for r in runs]),
               "first_round_s": summarize([r["first_round_s"] for r in runs]),
               "final_accuracy": summarize([r["final_accuracy"] for r in runs]),
               "peak_pss_bytes": summarize([r["peak_pss_bytes"] for r in sampled]),
               "wall_ratio": (paired_ratio(timed, ref_timed, "wall_s")
                              if reference and case["group"] != "c10000" else summarize([])),
               "pss_ratio": paired_ratio(sampled, ref_sampled, "peak_pss_bytes"),
               "runs": entry["runs"]}
        ref_accuracy = summarize([r["final_accuracy"] for r in ref_timed or ref_sampled])
        row["accuracy_diff_points"] = (
            100 * (row["final_accuracy"]["median"] - ref_accuracy["median"])
            if reference and case["group"] != "c10000" and row["final_accuracy"]["median"]
            is not None and ref_accuracy["median"] is not None else None)
        rows.append(row)
        if not runs:
            print(f"{case['name']:<34}{entry['state']:>8}"
                  f"{'  ' + entry['error'] if entry['error'] else ''}")
            continue
        wall, ratio = row["wall_s"], row["wall_ratio"]
        spread = f"({wall['min']:.1f}-{wall['max']:.1f})"
        ratio_spread = (f"({ratio['min']:.2f}-{ratio['max']:.2f})"
                        if ratio["median"] is not None else "")
        print(f"{case['name']:<34}{wall['median']:>8.1f}{spread:>14}"
              f"{fmt(ratio['median'], '>8.2f')}{ratio_spread:>13}"
              f"{fmt(row['first_round_s']['median'], '>10.2f')}"
              f"{fmt(row['final_accuracy']['median'], '>8.2f', 100)}"
              f"{fmt(row['accuracy_diff_points'], '>+7.2f')}"
              f"{fmt(row['peak_pss_bytes']['median'], '>9,.0f', 2**-20)}"
              f"{fmt(row['pss_ratio']['median'], '>7.2f')}")
    return rows


def targets(rows):
    """The issue's targets against the figures; each row: what, figure, goal, verdict."""
    found = []

    def add(what, value, goal, ok):
        verdict = "-" if value is None or ok is None else ("met" if ok(value) else "MISSED")
        found.append({"target": what, "value": value, "goal": goal, "verdict": verdict})

    for row in rows:
        if row["kind"] != "mptrain":
            continue
        name, group = row["case"], row["group"]
        if group == "c10000":
            add(f"{name}: PSS / 100-client run", row["pss_ratio"]["median"], "<= 1.1",
                lambda v: v <= 1.1)
            continue
        add(f"{name}: wall / plain", row["wall_ratio"]["median"], "<= 0.5",
            lambda v: v <= 0.5)
        if group == "reference":
            add(f"{name}: accuracy - plain (points)", row["accuracy_diff_points"],
                "within 0.5", lambda v: abs(v) <= 0.5)
            add(f"{name}: PSS / plain", row["pss_ratio"]["median"], "<= 1.2",
                lambda v: v <= 1.2)
    for row in rows:
        if row["kind"] == "flower":
            add(f"{row['case']}: wall / plain (the issue: ~1.5)", row["wall_ratio"]["median"],
                "info", None)
    if found:
        print(f"\n{'target (issue 9; the wall target is for 2 workers)':<58}{'figure':>9}"
              f"{'goal':>13}{'':>3}verdict")
        for t in found:
            print(f"{t['target']:<58}{fmt(t['value'], '>9.2f')}{t['goal']:>13}{'':>3}"
                  f"{t['verdict']}")
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--memory-repeats", type=int, default=1,
                        help="extra runs per case with memory sampling, for the PSS column "
                             "only (0: no PSS)")
    parser.add_argument("--quick", action="store_true", help="one repeat, no memory runs")
    parser.add_argument("--workers", default="2", help="comma-separated mptrain worker counts")
    parser.add_argument("--groups", default=",".join(GROUPS),
                        help=f"comma-separated subset of {', '.join(GROUPS)}")
    parser.add_argument("--kinds", default=",".join(KINDS),
                        help=f"comma-separated subset of {', '.join(KINDS)}")
    parser.add_argument("--flower-python", default=PYTHON,
                        help="the Python that runs flower_fedavg.py (one with flwr[simulation])")
    parser.add_argument("--mptrain-args", default="",
                        help="extra flags for every mptrain run, e.g. '--start-method fork'")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default="auto",
                        help="where the figures go (auto: "
                             "benchmarks/results/fedavg-DATE.json)")
    args = parser.parse_args()
    args.json = result_path("fedavg", args.json)

    def choose(text, allowed, flag):
        chosen = {item.strip() for item in text.split(",") if item.strip()}
        if chosen - set(allowed):
            parser.error(f"unknown {flag}: {', '.join(sorted(chosen - set(allowed)))}")
        return chosen

    groups = choose(args.groups, GROUPS, "group(s)")
    kinds = choose(args.kinds, KINDS, "kind(s)")
    try:
        workers = sorted({int(w) for w in args.workers.split(",") if w.strip()})
    except ValueError:
        parser.error("--workers takes comma-separated integers, e.g. 1,2")
    repeats = 1 if args.quick else args.repeats
    memory_repeats = 0 if args.quick else args.memory_repeats
    data_dir = mnist_dir(args.data_dir)

    cases = build_cases(data_dir, groups, kinds, workers, args.seed, args.flower_python,
                        shlex.split(args.mptrain_args))
    if not cases:
        parser.error("no case selected (c10000 has mptrain cases only)")
    print(f"{len(cases)} cases, {repeats} timed repeat(s), {memory_repeats} memory run(s) each:")
    rows = table(cases, run_cases(cases, repeats, memory_repeats))
    found = targets(rows)
    write_json(args.json, {"machine": machine_info(), "repeats": repeats,
                           "memory_repeats": memory_repeats, "groups": sorted(groups),
                           "kinds": sorted(kinds), "workers": workers, "seed": args.seed,
                           "workloads": {g: dict(zip(("clients", "clients_per_round",
                                                      "rounds"), WORKLOADS[g]), **COMMON)
                                         for g in sorted(groups)},
                           "mptrain_args": args.mptrain_args, "rows": rows, "targets": found})
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
