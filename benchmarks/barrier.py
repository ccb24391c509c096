"""Cost of one shared-memory collective (``comm.shm``): barrier, average_ and broadcast_
between forked processes, per operation, for a few world sizes and message sizes.

    python benchmarks/barrier.py                                  # 2 and 4 workers, 22k floats
    python benchmarks/barrier.py --workers 2,4,8,32 --numel 21840,38282 --repeats 5
    python benchmarks/barrier.py --json auto

Each worker runs ``--warmup`` barriers, then ``--rounds`` of each operation back to back and
reports its own seconds per operation; a cell's figure is the slowest rank's. Cells run
interleaved ``--repeats`` times (other load on the machine moves every cell alike), and the
table shows the median with the min-max. 21,840 floats is the MNIST CNN's parameters (what
``sync`` averages every ``--sync-every`` steps), 38,282 the digits CNN's. Nothing here
asserts anything about time.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_info, result_path, summarize, write_json  # noqa: E402

import torch  # noqa: E402

from mptrain.comm.shm import ShmGroupState  # noqa: E402
from mptrain.launch.supervisor import Supervisor  # noqa: E402
from mptrain.launch.tuning import usable_cores  # noqa: E402

OPERATIONS = ("barrier", "average_", "broadcast_")


def measure(rank, channel, state, numel, warmup, rounds):
    torch.set_num_threads(1)
    group = state.attach(rank)
    tensors = [torch.full((numel,), float(rank))]
    for _ in range(warmup):
        group.barrier()
    seconds = {}
    for operation in OPERATIONS:
        group.barrier()
        started = time.perf_counter()
        for _ in range(rounds):
            if operation == "barrier":
                group.barrier()
            elif operation == "average_":
                group.average_(tensors)
            else:
                group.broadcast_(tensors, src=0)
        seconds[operation] = (time.perf_counter() - started) / rounds
    channel.send(seconds)


def run_cell(workers: int, numel: int, warmup: int, rounds: int) -> dict:
    state = ShmGroupState.create(workers, numel, torch.float32, 60.0,
                                 oversubscribed=workers > usable_cores())
    per_rank = {}
    result = Supervisor("fork", on_message=per_rank.__setitem__).run(
        measure, [(state, numel, warmup, rounds)] * workers)
    if not result.ok:
        raise RuntimeError("; ".join(f.describe() for f in result.failures))
    return {op: max(seconds[op] for seconds in per_rank.values()) for op in OPERATIONS}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="2,4", help="comma-separated world sizes")
    parser.add_argument("--numel", default="21840", help="comma-separated float counts")
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="write the figures here (auto: "
                        "benchmarks/results/barrier-DATE.json)")
    parser.add_argument("--label", default="", help="a name for this build, kept in the JSON")
    args = parser.parse_args(argv)
    args.json = result_path("barrier", args.json)
    cells = [(int(w), int(n)) for w in args.workers.split(",") for n in args.numel.split(",")]
    samples = {cell: [] for cell in cells}
    for repeat in range(args.repeats):
        for workers, numel in cells:
            # Fewer rounds where every operation takes a round of context switches.
            rounds = max(50, args.rounds * min(1.0, usable_cores() / workers))
            samples[(workers, numel)].append(
                run_cell(workers, numel, args.warmup // 4 + 1, int(rounds)))
    rows = []
    print(f"{'workers':>7} {'numel':>8}  " + "  ".join(f"{op + ' us':>24}" for op in OPERATIONS))
    for (workers, numel), runs in samples.items():
        row = {"workers": workers, "numel": numel}
        texts = []
        for op in OPERATIONS:
            stats = summarize([run[op] * 1e6 for run in runs])
            row[op + "_us"] = stats
            texts.append(f"{stats['median']:8.1f} ({stats['min']:.1f}-{stats['max']:.1f})")
        rows.append(row)
        print(f"{workers:>7} {numel:>8}  " + "  ".join(f"{t:>24}" for t in texts))
    if args.json:
        write_json(args.json, {"machine": machine_info(), "label": args.label,
                               "threads_per_worker": 1, "rounds": args.rounds,
                               "repeats": args.repeats, "pid": os.getpid(), "cells": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
