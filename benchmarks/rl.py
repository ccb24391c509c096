"""Reinforcement learning on CartPole-v1 (issue 12): how fast ``mptrain rl`` solves it, and
how environment throughput scales with actors.

    python benchmarks/rl.py                          # everything, seeds 0-9
    python benchmarks/rl.py --only a3c --seeds 0,1   # a part
    python benchmarks/rl.py --json auto --baseline sb3.json   # beside a baseline's JSON

"Solved" is the greedy policy's mean return over 100 evaluation episodes >= 475. Every run
is a fresh ``mptrain rl`` of the tree this script lives in, with ``--eval-episodes 100
--eval-every R --target-return 475``: it stops at the first evaluation that reaches 475,
and the figures are that evaluation's environment steps and its seconds since the run
started (start-up and every earlier evaluation included, so the time is an upper bound).
Targets: a3c with 2 workers within 60 s in >= 9 of 10 seeds; dqn within 100k environment
steps in >= 9 of 10 seeds; ppo with 2 actors within 60 s in >= 9 of 10 seeds, with a
median wall to 475 no longer than a3c's; environment steps/s with 2 actors >= 1.8x one actor
(a3c, fixed work, interleaved repeats, ratio within each repeat so that outside load moves
both sides; a control cell runs two independent 1-actor runs at once: what two processes get
from the machine at that moment with nothing shared).
At the end, one row per algorithm: seeds solved / seeds, median environment steps and
seconds to 475 over the solved seeds, median environment steps/s; ``--baseline FILE``
(repeatable) adds the rows of baseline scripts' JSON -- stable-baselines3's DQN and PPO with
rl-baselines3-zoo's hyperparameters (``baselines/sb3_dqn.py``, ``baselines/sb3_ppo.py``),
CleanRL's ``ppo.py`` (``baselines/cleanrl_ppo.py``), set up by ``baselines/setup.sh`` --
run on the same machine with the same measure; a baseline run stopped by its wall cap
counts as not solved. Files of one baseline (e.g. one per seed) make one row.
Nothing here asserts anything; it prints figures and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, machine_info, result_path, run_measured, write_json  # noqa: E402

SOLVE = {
    # a3c: 2 actor-learners, stopped by the 60 s budget's worth of steps
    "a3c": ["--algo", "a3c", "--workers", "2", "--steps", "400000", "--round-steps", "10000",
            "--eval-every", "2"],
    # dqn: 2 actors and the learner, 100k environment steps at most
    "dqn": ["--algo", "dqn", "--workers", "2", "--steps", "100000", "--round-steps", "5000",
            "--eval-every", "1"],
    # ppo: 2 actors (rank 0 also the learner), 8 environments each; it solves in ~15-20k steps,
    # so it is evaluated every 5,000 (a coarser grid would add up to a round to its time)
    "ppo": ["--algo", "ppo", "--workers", "2", "--steps", "200000", "--round-steps", "5000",
            "--eval-every", "1"],
}
BUDGET = {"a3c": ("target_reached_at_s", 60.0), "dqn": ("target_reached_at_steps", 100_000),
          "ppo": ("target_reached_at_s", 60.0)}
ALGOS = tuple(SOLVE)


def rl_run(flags: list[str], out: Path, timeout_s: float = 900) -> dict:
    command = [sys.executable, "-m", "mptrain", "rl", "--env", "CartPole-v1", "--quiet",
               "--out", str(out), *flags]
    measured = run_measured(command, timeout_s=timeout_s,
                            env={"PYTHONPATH": str(REPO / "src")}, sample_memory=False)
    if measured["returncode"] != 0:
        return {"error": measured["output"].strip().splitlines()[-3:]}
    summary = json.loads((out / "summary.json").read_text())
    summary["command_wall_s"] = measured["wall_s"]
    return summary


def solve_cell(algo: str, seed: int, folder: Path, more: tuple[str, ...] = ()) -> dict:
    # 100-episode evaluations need no confirming ones, and their time counts in the time
    # to solve: off, as in the sittings before --confirm-episodes (issue 55)
    flags = SOLVE[algo] + [*more, "--seed", str(seed), "--eval-episodes", "100",
                           "--target-return", "475", "--confirm-episodes", "0"]
    summary = rl_run(flags, folder / f"{algo}-{seed}")
    if "error" in summary:
        return {"algo": algo, "seed": seed, **summary}
    key, limit = BUDGET[algo]
    value = summary.get(key)
    cell = {"algo": algo, "seed": seed, "solved_at_steps": summary["target_reached_at_steps"],
            "solved_at_s": summary["target_reached_at_s"],
            "final_eval_return": summary["eval_return"], "env_steps": summary["env_steps"],
            "env_steps_per_s": summary["env_steps_per_s"], "wall_s": summary["wall_s"],
            "within_budget": value is not None and value <= limit}
    print(f"{algo} seed {seed}: " + (f"solved at {cell['solved_at_steps']:,} steps, "
                                     f"{cell['solved_at_s']:.1f} s" if value is not None
                                     else f"not solved (last greedy mean "
                                          f"{summary['eval_return']:.1f})")
          + f" · {'within' if cell['within_budget'] else 'outside'} budget", flush=True)
    return cell


def table_row(name: str, cells: list[dict]) -> dict:
    """Seeds solved, and medians over the solved seeds, of one algorithm's cells."""
    solved = [c for c in cells if c.get("within_budget")]
    rates = [c["env_steps_per_s"] for c in cells if c.get("env_steps_per_s")]
    return {"name": name, "solved": len(solved), "seeds": len(cells),
            "median_steps": statistics.median(c["solved_at_steps"] for c in solved)
            if solved else None,
            "median_s": statistics.median(c["solved_at_s"] for c in solved) if solved else None,
            "median_steps_per_s": statistics.median(rates) if rates else None}


def is_count(value) -> bool:
    """A finite number >= 0 (JSON's true/false and NaN are not)."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and value >= 0)


def baseline_cell(cell) -> dict:
    """One seed of a baseline script's JSON as a cell of the table; ValueError if it is not
    one. Its steps/s leave its evaluations out where the script recorded that
    (``env_steps_per_s``, as mptrain's own); older files (sb3_dqn.py) have env steps over
    wall seconds, evaluations included."""
    if not isinstance(cell, dict) or not isinstance(cell.get("solved"), bool):
        raise ValueError("a cell without a true/false 'solved'")
    numbers = ("steps_to_target", "wall_to_target_s") if cell["solved"] else ()
    for key in (*numbers, "env_steps", "wall_s"):
        if not is_count(cell.get(key)):
            raise ValueError(f"a cell whose {key!r} is {cell.get(key)!r}, not a number >= 0")
    rate = cell.get("env_steps_per_s")
    if not is_count(rate) or rate == 0:
        rate = cell["env_steps"] / cell["wall_s"] if cell["wall_s"] else None
    return {"within_budget": cell["solved"],
            "solved_at_steps": cell["steps_to_target"] if cell["solved"] else None,
            "solved_at_s": cell["wall_to_target_s"] if cell["solved"] else None,
            "env_steps_per_s": rate}


def baseline_rows(paths: list[str]) -> list[dict]:
    """One row per baseline named in the files; files of the same baseline (a sitting split
    by seed) pool their cells. Read before any run starts, so that a wrong path costs
    nothing; a file that is not a baseline script's JSON is a ValueError naming it."""
    pooled: dict[str, list[dict]] = {}
    for path in paths:
        try:
            data = json.loads(Path(path).read_text())
            if not isinstance(data, dict) or not isinstance(data.get("baseline"), str) \
                    or not isinstance(data.get("cells"), list):
                raise ValueError("no 'baseline' name and 'cells' list")
            cells = [baseline_cell(cell) for cell in data["cells"]]
        except (OSError, ValueError, RecursionError) as error:
            raise ValueError(f"--baseline {path}: not a baseline script's JSON ({error}); "
                             "give a file that benchmarks/baselines/sb3_dqn.py, sb3_ppo.py "
                             "or cleanrl_ppo.py wrote with --json") from None
        pooled.setdefault(data["baseline"], []).extend(cells)
    return [table_row(name, cells) for name, cells in pooled.items()]


def print_table(rows: list[dict]) -> None:
    def fmt(value, spec):
        return "-" if value is None else format(value, spec)

    print(f"{'':52} {'solved':>7} {'steps to 475':>13} {'s to 475':>9} {'steps/s':>8}")
    for r in rows:
        print(f"{r['name'][:52]:52} {r['solved']:>3}/{r['seeds']:<3} "
              f"{fmt(r['median_steps'], ',.0f'):>13} {fmt(r['median_s'], '.1f'):>9} "
              f"{fmt(r['median_steps_per_s'], ',.0f'):>8}")


def throughput(repeats: int, steps: int, folder: Path) -> dict:
    ratios, controls, cells = [], [], []
    for repeat in range(repeats):
        rates = {}
        for workers in (1, 2):
            summary = rl_run(["--algo", "a3c", "--workers", str(workers), "--steps",
                              str(steps), "--round-steps", str(steps // 4),
                              "--eval-episodes", "1", "--eval-every", "0"],
                             folder / f"tp-{repeat}-{workers}")
            rates[workers] = summary.get("env_steps_per_s")
            cells.append({"repeat": repeat, "workers": workers, "env_steps_per_s":
                          rates[workers]})
        # Control: two independent 1-actor runs at once -- what the machine gives two
        # processes right now, with nothing shared between them.
        with ThreadPoolExecutor(2) as pool:
            pair = list(pool.map(lambda i: rl_run(
                ["--algo", "a3c", "--workers", "1", "--steps", str(steps), "--round-steps",
                 str(steps // 4), "--eval-episodes", "1", "--eval-every", "0"],
                folder / f"tp-{repeat}-pair{i}"),
                range(2)))
        rates["pair"] = sum(p.get("env_steps_per_s") or 0 for p in pair)
        cells.append({"repeat": repeat, "workers": "2 separate runs",
                      "env_steps_per_s": rates["pair"]})
        if rates[1] and rates[2]:
            ratios.append(rates[2] / rates[1])
            controls.append(rates["pair"] / rates[1])
            print(f"throughput repeat {repeat}: 1 actor {rates[1]:,.0f} steps/s, 2 actors "
                  f"{rates[2]:,.0f} steps/s, ratio {ratios[-1]:.2f}; two separate 1-actor "
                  f"runs {rates['pair']:,.0f} steps/s, ratio {controls[-1]:.2f}", flush=True)
    return {"cells": cells, "ratios": ratios,
            "median_ratio": statistics.median(ratios) if ratios else None,
            "control_ratios": controls,
            "median_control_ratio": statistics.median(controls) if controls else None}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2,3,4,5,6,7,8,9")
    parser.add_argument("--flags", default="",
                        help='more mptrain rl flags for every run (a candidate: "--anneal-lr")')
    parser.add_argument("--only", choices=(*ALGOS, "throughput"))
    parser.add_argument("--baseline", action="append", default=[],
                        help="a baseline script's JSON to show beside (repeatable)")
    parser.add_argument("--repeats", type=int, default=3, help="throughput repeats")
    parser.add_argument("--throughput-steps", type=int, default=60_000)
    parser.add_argument("--json", help="write the figures here (auto: "
                        "benchmarks/results/rl-DATE.json)")
    args = parser.parse_args(argv)
    args.json = result_path(f"rl-{args.only}" if args.only else "rl", args.json)
    try:
        baselines = baseline_rows(args.baseline)
    except ValueError as error:
        parser.error(str(error))
    seeds = [int(s) for s in args.seeds.split(",")]
    results = {"machine": machine_info(), "seeds": seeds}
    with tempfile.TemporaryDirectory(prefix="mptrain-rl-bench-") as temp:
        folder = Path(temp)
        for algo in ALGOS:
            if args.only in (None, algo):
                cells = [solve_cell(algo, seed, folder, tuple(args.flags.split()))
                         for seed in seeds]
                solved = sum(1 for c in cells if c.get("within_budget"))
                results[algo] = {"cells": cells, "within_budget": solved,
                                 "flags": SOLVE[algo] + args.flags.split()}
                print(f"{algo}: solved within budget in {solved} of {len(seeds)} seeds")
        if args.only in (None, "throughput"):
            results["throughput"] = throughput(args.repeats, args.throughput_steps, folder)
            ratio = results["throughput"]["median_ratio"]
            print(f"env steps/s, 2 actors over 1 (a3c): median ratio "
                  f"{ratio:.2f}" if ratio else "throughput: no result")
    rows = [table_row(f"mptrain {algo} (2 workers)", results[algo]["cells"])
            for algo in ALGOS if algo in results]
    rows += baselines
    if args.baseline:
        results["baseline_files"] = args.baseline
    if rows:
        results["table"] = rows
        print_table(rows)
    if args.json:
        write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
