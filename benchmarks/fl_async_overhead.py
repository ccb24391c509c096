"""``fl_async.py --overhead``: the simulator's own wall-clock cost per client update, FedBuff
against a synchronous FedAvg round (issue 51: at most 1.1x), measured in about a minute.

How it keeps training cost out of the ratio: on ``shards:2`` every client holds the same 600
samples, so every client update is the same work (60 steps of the 2NN, batch 10) whoever
trains it and whenever; each strategy runs the same number of client updates (``--updates``)
with one evaluation, at the end; and the wall time counted runs from the end of the first
round (process start, data loading, the first round's warm-up left out) to the end of the
last round but one (the final evaluation left out), over the updates reported in between,
read from each round's ``elapsed_s`` in metrics.jsonl. What remains per update is the
training -- equal in every row -- plus what the strategy adds: sync's sampling, round
barrier and averaging every 10 updates; fedbuff's event schedule, pending table, staleness
weights, barriers and server step every B updates. Its ratio to sync's is the overhead
ratio, and the difference (ms an update) is the simulator's extra cost with the training
taken out. Every row trains one client at a time (``--vectorize-clients off``, the
default of ``--client-path``): by default a synchronous round of 10 clients on one worker
stacks them (``auto`` stacks 10 or more on a CPU) while FedBuff K=10 B=5 starts about 5 a
version and trains them one by one, a difference of training path, not of the simulator;
``--client-path auto`` measures the paths a user gets by default instead. The runs
alternate sync, fedbuff, sync, ... ``--repeats`` times and the fastest
of each is kept: a load that comes and goes slows a run, it never speeds one up. It needs a
quiet machine: the figures of a loaded one are printed but say nothing.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path

from common import run_measured

#: (row, strategy flags, client updates a round): the rows at 10 clients in flight.
ROWS = [("sync", ["--strategy", "fedavg", "--clients-per-round", "10"], 10),
        ("fedbuff-10-5", ["--strategy", "fedbuff", "--concurrency", "10",
                          "--buffer-size", "5"], 5),
        ("fedbuff-10-10", ["--strategy", "fedbuff", "--concurrency", "10",
                           "--buffer-size", "10"], 10)]


def steady_seconds_per_update(records: list[dict]) -> float:
    """Wall seconds an update between the end of the first round and the end of the last
    round but one (see the module's docstring)."""
    if len(records) < 3:
        raise SystemExit("--overhead needs at least 3 rounds a row: raise --updates")
    middle = records[1:-1]
    updates = sum(r.get("reported") or 0 for r in middle)
    return (records[-2]["elapsed_s"] - records[0]["elapsed_s"]) / max(1, updates)


def one_run(base: list[str], flags: list[str], rounds: int, workers: int,
            client_path: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="fl-async-overhead-") as out:
        command = [*base, "--out", out, *flags, "--rounds", str(rounds),
                   "--eval-every", str(rounds), "--workers", str(workers),
                   "--vectorize-clients", client_path]
        measured = run_measured(command, timeout_s=1800, sample_memory=False)
        if measured["returncode"] != 0:
            raise SystemExit(f"{' '.join(command)} failed: "
                             f"{measured['output'].strip().splitlines()[-1:]}")
        records = [json.loads(line) for line in (Path(out) / "metrics.jsonl").open()]
    return {"steady_s_per_update": steady_seconds_per_update(records),
            "process_wall_s": measured["wall_s"],
            "updates": sum(r.get("reported") or 0 for r in records)}


def measure_overhead(base: list[str], updates: int, repeats: int, workers: int,
                     client_path: str = "off") -> dict:
    """Each row's fastest steady seconds an update over ``repeats`` alternating runs, and
    its ratio to sync's."""
    kept = {name: [] for name, _, _ in ROWS}
    for repeat in range(repeats):
        for name, flags, per_round in ROWS:
            run = one_run(base, flags, updates // per_round, workers, client_path)
            kept[name].append(run)
            print(f"overhead {name} repeat {repeat}: "
                  f"{1000 * run['steady_s_per_update']:.2f} ms an update", flush=True)
    best = {name: min(r["steady_s_per_update"] for r in runs) for name, runs in kept.items()}
    sync = best["sync"]
    return {"updates": updates, "repeats": repeats, "workers": workers,
            "client_path": client_path, "runs": kept,
            "rows": {name: {"s_per_update": s, "ratio_to_sync": s / sync,
                            "extra_ms_per_update": 1000 * (s - sync),
                            "spread": (statistics.pstdev(r["steady_s_per_update"]
                                                         for r in kept[name]) / s)}
                     for name, s in best.items()}}


def overhead_lines(figures: dict) -> list[str]:
    lines = [(f"simulator overhead: {figures['updates']} client updates a row, fastest of "
              f"{figures['repeats']}, --workers {figures['workers']}, --vectorize-clients "
              f"{figures['client_path']}, steady rounds only"),
             f"{'row':<16}{'ms/update':>10}{'x sync':>8}{'extra ms':>10}{'spread':>8}"]
    for name, row in figures["rows"].items():
        lines.append(f"{name:<16}{1000 * row['s_per_update']:>10.2f}"
                     f"{row['ratio_to_sync']:>8.2f}{row['extra_ms_per_update']:>10.2f}"
                     f"{100 * row['spread']:>7.0f}%")
    for name, row in figures["rows"].items():
        if name != "sync":
            held = "holds" if row["ratio_to_sync"] <= 1.1 else "does NOT hold"
            lines.append(f"{name}: wall per client update {row['ratio_to_sync']:.2f}x sync's "
                         f"(issue 51: <= 1.1x) -> {held}")
    return lines
