"""What a forked worker's first steps cost, with and without the parent's rehearsal
(``mptrain.launch.rehearsal``): the per-process cost that more workers than cores pay one
after another.

    python benchmarks/fork_first_steps.py                     # 3 repeats, 8 children each
    python benchmarks/fork_first_steps.py --repeats 5 --children 16 --json out.json

Each repeat starts two fresh parents, one per mode, alternately. Both load digits-60k, build
the MNIST CNN it trains and pay torch's lazy optimizer import (as ``mptrain run`` does); the
"rehearsed" parent then trains a throwaway copy one step at batch 64 and at a shard's last
batch (42, as with 64 workers), both trim their heap, and each forks its children one at a
time. A child trains its own channels-last replica with Adam for 14 steps of 64 and one of
42 -- a 64-worker shard of digits-60k -- and reports the wall time of its first and last
step and the CPU time of all 15. Nothing here asserts anything about time.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_info, result_path, steal_seconds, write_json  # noqa: E402

MODES = ("cold", "rehearsed")
FULL, LAST, STEPS = 64, 42, 14


def parent(mode: str, children: int) -> dict:
    import torch

    from mptrain.config import TrainConfig
    from mptrain.data.sources import load_data
    from mptrain.launch import rehearsal, tuning, warmup
    from mptrain.models import build_model

    torch.set_num_threads(1)
    bundle = load_data("digits-60k")
    bundle.share_memory_()   # as before mptrain's workers start
    model = build_model(bundle.default_model, bundle.input_shape, 10)
    model.share_memory()
    config = TrainConfig(batch_size=FULL, optimizer="adam", lr=0.006)
    warmup.finish()
    if mode == "rehearsed":
        assert rehearsal.rehearse_first_steps(model, bundle, config, threads=1,
                                              channels_last=True, batch_sizes=[FULL, LAST])
    tuning.release_free_heap()
    results = []
    for _ in range(children):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            os.write(write, json.dumps(child(model, bundle, config)).encode())
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as pipe:
            results.append(json.loads(pipe.read()))
        os.waitpid(pid, 0)
    return {"mode": mode, "children": results}


def child(model, bundle, config) -> dict:
    import torch

    from mptrain.engine.channels_last import ChannelsLastTraining
    from mptrain.engine.optim import build_optimizer
    from mptrain.engine.task import loss_fn

    cpu_start = time.process_time()
    replica = copy.deepcopy(model)
    forward = ChannelsLastTraining(replica, torch.device("cpu")).forward
    optimizer = build_optimizer(replica.parameters(), config.optimizer, config.lr,
                                config.momentum, config.weight_decay)
    steps_ms = []
    for size in [FULL] * STEPS + [LAST]:
        inputs, targets = bundle.train.batch(torch.randint(0, len(bundle.train), (size,)))
        started = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss_fn(bundle.task, forward(inputs), targets).backward()
        optimizer.step()
        steps_ms.append((time.perf_counter() - started) * 1e3)
    return {"first_ms": steps_ms[0], "later_full_ms": statistics.median(steps_ms[1:STEPS]),
            "last_batch_ms": steps_ms[-1], "cpu_ms": (time.process_time() - cpu_start) * 1e3}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--children", type=int, default=8)
    parser.add_argument("--json", help="write the figures here (auto: "
                        "benchmarks/results/fork-first-steps-DATE.json)")
    parser.add_argument("--parent", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.json = result_path("fork-first-steps", args.json)
    if args.parent:
        print(json.dumps(parent(args.parent, args.children)))
        return 0
    runs = []
    for repeat in range(args.repeats):
        for mode in MODES if repeat % 2 == 0 else MODES[::-1]:
            steal_before = steal_seconds()
            output = subprocess.run([sys.executable, __file__, "--parent", mode, "--children",
                                     str(args.children)], capture_output=True, text=True,
                                    check=True).stdout
            run = {**json.loads(output.splitlines()[-1]), "repeat": repeat,
                   "steal_s": None if steal_before is None else steal_seconds() - steal_before}
            runs.append(run)
            print(f"repeat {repeat + 1} {mode:>9}: first step "
                  f"{_median(run, 'first_ms'):6.1f} ms, last batch "
                  f"{_median(run, 'last_batch_ms'):5.1f} ms, 15 steps "
                  f"{_median(run, 'cpu_ms'):6.1f} ms CPU (steal {run['steal_s']:.1f} s)",
                  flush=True)
    print(f"\nmedians over repeats of each parent's median child ({args.children} children):")
    print(f"{'mode':>10} {'first step ms':>14} {'later steps ms':>15} {'last batch ms':>14}"
          f" {'CPU ms, 15 steps':>17}")
    for mode in MODES:
        mine = [r for r in runs if r["mode"] == mode]
        figures = [statistics.median(_median(r, key) for r in mine)
                   for key in ("first_ms", "later_full_ms", "last_batch_ms", "cpu_ms")]
        print(f"{mode:>10} {figures[0]:>14.1f} {figures[1]:>15.1f} {figures[2]:>14.1f}"
              f" {figures[3]:>17.1f}")
    if args.json:
        write_json(args.json, {"machine": machine_info(), "children": args.children,
                               "runs": runs})
    return 0


def _median(run: dict, key: str) -> float:
    return statistics.median(c[key] for c in run["children"])


if __name__ == "__main__":
    sys.exit(main())
