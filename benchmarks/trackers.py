"""What each experiment tracker costs a run (issue 26): ``mptrain run`` on the digits default
(single process, 10 epochs) with no tracker, then with each of ``--logger tensorboard``,
``csv``, ``mlflow`` (local SQLite store) and ``wandb`` (offline), interleaved repeat by
repeat so that the machine's drift hits every case alike.

    python benchmarks/trackers.py                        # 5 repeats, every installed tracker
    python benchmarks/trackers.py --repeats 9 --loggers tensorboard,csv --json auto

Per case, medians over the repeats of:
- ``round_end_ms``: the time the tracker's ``on_round_end`` takes (timed inside the run,
  around the tracker's own call), and the same as a share of the epoch's cadence
  (``round_end_pct``): the per-epoch cost, the figure the target (<= 2% with TensorBoard and
  CSV) is about;
- ``cadence_s``: run start to end, per epoch (the differences of ``elapsed_s`` in
  metrics.jsonl, which include the parent's work between epochs), and its ratio to the run
  without a tracker (noisier: it carries the machine's drift between two runs);
- ``start_ms`` / ``end_ms``: ``on_run_start`` (opening the run, importing the library) and
  ``on_end`` (artifacts, closing), paid once per run; ``first_round_end_ms`` too (W&B opens
  its run there, after the workers have started);
- ``wall_s``: the whole command.

The tracker runs in the run's own process here (``single``): with worker processes the
parent's tracker work overlaps their training instead and costs less.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, machine_info, result_path, summarize, write_json  # noqa: E402

NEEDS = {"tensorboard": ("tensorboard",), "csv": (),
         "mlflow": ("mlflow", "sqlalchemy", "alembic"), "wandb": ("wandb",)}

# Runs inside the measured process: times every call of each tracker, then the command.
_CHILD = """
import json, sys, time
from mptrain import trackers
from mptrain.callbacks import EVENTS
timings = {}
make = trackers.make_trackers

def timed(event, method):
    def call(*args):
        started = time.perf_counter()
        try:
            return method(*args)
        finally:
            timings.setdefault(event, []).append(time.perf_counter() - started)
    return call

def timed_trackers(*args, **kwargs):
    made = make(*args, **kwargs)
    for tracker in made:
        for event in EVENTS:
            setattr(tracker, event, timed(event, getattr(tracker, event)))
    return made

trackers.make_trackers = timed_trackers
from mptrain.cli import main
code = main(sys.argv[2:])
with open(sys.argv[1], "w") as handle:
    json.dump(timings, handle)
sys.exit(code)
"""


def installed(name: str) -> bool:
    return all(importlib.util.find_spec(module) for module in NEEDS[name])


def one_run(logger: str | None, folder: Path, extra: list[str]) -> dict:
    out = folder / "run"
    timing = folder / "timing.json"
    args = ["run", "--out", str(out), "--quiet", *extra]
    if logger:
        args += ["--logger", logger]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "WANDB_MODE": "offline",
           "WANDB_SILENT": "true", "WANDB_CACHE_DIR": str(folder / "wandb-cache"),
           "WANDB_DATA_DIR": str(folder / "wandb-data"),
           "WANDB_CONFIG_DIR": str(folder / "wandb-config")}
    env.pop("MLFLOW_TRACKING_URI", None)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", _CHILD, str(timing), *args], env=env,
                          capture_output=True, text=True, timeout=900)
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"run with --logger {logger} failed:\n{done.stderr[-3000:]}")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    elapsed = [row["elapsed_s"] for row in rows]
    cadence = statistics.median(b - a for a, b in zip(elapsed, elapsed[1:]))
    calls = json.loads(timing.read_text()) if timing.exists() else {}

    def ms(event, pick=statistics.median):
        values = calls.get(event)
        return pick(values) * 1000 if values else 0.0

    return {"wall_s": wall, "cadence_s": cadence, "epoch_s": statistics.median(
                row["epoch_s"] for row in rows),
            "round_end_ms": ms("on_round_end"),
            # W&B opens its run at the first round's end (not before the workers fork).
            "first_round_end_ms": ms("on_round_end", lambda values: values[0]),
            "start_ms": ms("on_run_start", sum),
            "end_ms": ms("on_end", sum), "epochs": len(rows),
            "stderr": done.stderr.strip()[-500:]}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--loggers", default="tensorboard,csv,mlflow,wandb",
                        help="trackers to measure, comma-separated (those not installed are "
                             "skipped)")
    parser.add_argument("--run-args", default="",
                        help="extra flags for every mptrain run (default: the digits "
                             "default as it is)")
    parser.add_argument("--json", help="write the figures here (auto: "
                                       "benchmarks/results/trackers-DATE.json)")
    args = parser.parse_args(argv)
    args.json = result_path("trackers", args.json)
    wanted = [name for name in args.loggers.split(",") if name]
    cases = [None] + [name for name in wanted if installed(name)]
    skipped = [name for name in wanted if not installed(name)]
    if skipped:
        print(f"not installed, skipped: {', '.join(skipped)} (pip install 'mptrain[trackers]')")
    extra = args.run_args.split()
    samples: dict[str, list[dict]] = {str(case): [] for case in cases}
    for repeat in range(args.repeats):
        for case in cases:
            with tempfile.TemporaryDirectory(prefix="mptrain-trackers-") as folder:
                sample = one_run(case, Path(folder), extra)
            samples[str(case)].append(sample)
            print(f"repeat {repeat + 1}/{args.repeats} {case or 'no tracker':12s} "
                  f"cadence {sample['cadence_s']:.3f} s  on_round_end "
                  f"{sample['round_end_ms']:.2f} ms  wall {sample['wall_s']:.1f} s", flush=True)

    base = samples["None"]
    table = {}
    print(f"\n{'tracker':12s} {'round end ms':>12s} {'% of epoch':>10s} {'cadence x':>10s} "
          f"{'start ms':>9s} {'end ms':>8s} {'wall s':>7s}")
    for case in cases:
        runs = samples[str(case)]
        pct = [100 * r["round_end_ms"] / 1000 / r["cadence_s"] for r in runs]
        ratio = [r["cadence_s"] / b["cadence_s"] for r, b in zip(runs, base)]
        table[str(case)] = {
            "round_end_ms": summarize([r["round_end_ms"] for r in runs]),
            "round_end_pct": summarize(pct), "cadence_s": summarize([r["cadence_s"]
                                                                     for r in runs]),
            "cadence_x_none": summarize(ratio),
            "epoch_s": summarize([r["epoch_s"] for r in runs]),
            "start_ms": summarize([r["start_ms"] for r in runs]),
            "first_round_end_ms": summarize([r["first_round_end_ms"] for r in runs]),
            "end_ms": summarize([r["end_ms"] for r in runs]),
            "wall_s": summarize([r["wall_s"] for r in runs])}
        row = table[str(case)]
        print(f"{case or 'none':12s} {row['round_end_ms']['median']:12.2f} "
              f"{row['round_end_pct']['median']:10.2f} {row['cadence_x_none']['median']:10.3f} "
              f"{row['start_ms']['median']:9.0f} {row['end_ms']['median']:8.0f} "
              f"{row['wall_s']['median']:7.1f}")
    if args.json:
        write_json(args.json, {"machine": machine_info(), "repeats": args.repeats,
                               "run_args": extra, "cases": table, "samples": samples})
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
