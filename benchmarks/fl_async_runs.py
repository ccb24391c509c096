"""``fl_async.py``'s runs: one ``mptrain run`` of a row on a seed, what is kept of it, the
virtual time to a target read from it, and the plot of accuracy against virtual time."""

from __future__ import annotations

import json
import math
import sys
import tempfile
from pathlib import Path

from common import run_measured


def run_cell(data: list[str], flags: list[str], seed: int, args, target: float) -> dict:
    """One run: virtual time, test accuracy and clients reported per aggregation. Stopped
    at the first evaluation reaching ``target`` (unless ``--full-runs``): the rounds before
    it are the full run's -- nothing in a round depends on --rounds (tested:
    tests/strategies/fedbuff, tests/strategies/fedavg/test_virtual_clock.py) -- so its time
    to the target is too."""
    stop = [] if args.full_runs else ["--target-accuracy", f"{target:g}"]
    with tempfile.TemporaryDirectory(prefix="fl-async-") as out:
        command = [sys.executable, "-m", "mptrain", "run", "--quiet", "--out", out, *data,
                   *flags, "--rounds", str(args.rounds), "--seed", str(seed),
                   "--workers", str(args.workers), *stop]
        measured = run_measured(command, timeout_s=48 * 3600, sample_memory=False)
        metrics = Path(out) / "metrics.jsonl"
        records = [json.loads(line) for line in metrics.open()] if metrics.exists() else []
    if measured["returncode"] != 0:
        tail = (measured["output"].strip().splitlines() or ["(no output)"])[-1]
        return {"ok": False, "error": tail, "command": command}
    return {"ok": True, "command": command, "wall_s": measured["wall_s"],
            "virtual_time_s": [r.get("virtual_time_s") for r in records],
            "accuracy": [r.get("test_accuracy") for r in records],
            "reported": [r.get("reported") or 0 for r in records],
            "updates": sum(r.get("reported") or 0 for r in records),
            "stopped_at_target": None if args.full_runs else target}


def answers(kept: dict, target: float) -> bool:
    """Whether a kept run tells the time to ``target``: a full run does, and so does one
    stopped at that target or a higher one (it passed ``target`` on its way)."""
    stopped = kept.get("stopped_at_target")
    return stopped is None or stopped >= target


def time_to_target(run: dict, target: float) -> float:
    """Virtual seconds until the accuracy first reaches ``target`` (infinity: never)."""
    for seconds, accuracy in zip(run["virtual_time_s"], run["accuracy"]):
        if accuracy is not None and accuracy >= target and seconds is not None:
            return seconds
    return math.inf


def plot(path: Path, panels: dict) -> None:
    """Test accuracy against virtual time up to 1.5x the slowest time to the target, a panel
    a set of clients, a colour a row, a line a seed; ``panels``: {set: (target, [run, ...])}.
    Stopped runs end at their target."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.2), squeeze=False)
    for axis, (name, (target, runs)) in zip(axes[0], panels.items()):
        colours = {}
        for run in runs:
            if not run.get("ok") or not run.get("accuracy"):
                continue
            points = [(t, a) for t, a in zip(run["virtual_time_s"], run["accuracy"])
                      if t is not None and a is not None]
            colour = colours.setdefault(run["row"], f"C{len(colours)}")
            axis.plot(*zip(*points), color=colour, linewidth=1, alpha=0.8,
                      label=run["row"] if run["seed"] == min(
                          r["seed"] for r in runs if r["row"] == run["row"]) else None)
        axis.axhline(target, color="grey", linestyle="--", linewidth=0.8)
        reached = [t for t in (time_to_target(r, target) for r in runs if r.get("ok"))
                   if math.isfinite(t)]
        if reached:   # the race to the target, not the full runs' tails
            axis.set_xlim(0, 1.5 * max(reached))
        axis.set(title=name, xlabel="virtual time (s)", ylabel="test accuracy")
        axis.set_ylim(top=min(1.0, target + 0.08))
        if colours:
            axis.legend(fontsize=8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
