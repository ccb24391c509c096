"""Does an RL run hand back a policy that plays well (issue 55)? The final policy and the
kept-best one of ``mptrain rl`` runs as a new user types them, over seeds.

    python benchmarks/rl_hold.py --algos dqn --seeds 100-109 --jobs 4          # tuning
    python benchmarks/rl_hold.py --algos dqn --seeds 100-109 --flags="--anneal-lr"
    python benchmarks/rl_hold.py --seeds 200-209 --jobs 4 --json auto          # the report

Each cell is ``mptrain rl --env CartPole-v1 --algo A --workers 2 --steps S --seed N`` with
the documented step count of its algorithm (dqn 100,000, a3c 200,000, ppo 100,000) and the
default evaluations (every 2 rounds, 2 episodes, the best kept), plus ``--flags``. Its
``final.pt`` and ``best.pt`` then play ``--test-episodes`` (10) greedy episodes each, on
episode seeds none of the run's evaluations used (``acting.EVAL_SEED + 1000 + i``), so
the best policy is not scored on the episodes it was chosen on. A policy "holds" when its
mean is >= 475. Rows: per algorithm, how many seeds' final and best policies hold, the
medians of their means, and the median steps to the run's first evaluation >= 475 (each
cell also keeps its evaluations, and how many from the run's second half held).

Seeds: tune on 100-109, report on 200-209 and 300-309 (docs/rl.md names them; the benchmark's
``rl.py`` seeds 0-9 and earlier sittings' 1-49 are neither). Returns do not depend on the
machine's load (dqn and ppo: a seed names the run; a3c's spread is the benchmark's), so
``--jobs`` runs cells side by side. Nothing here asserts anything; it prints figures and
writes JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from common import machine_info, result_path, write_json  # noqa: E402
from rl import rl_run  # noqa: E402

#: The step counts docs/rl.md and the README give each algorithm on CartPole-v1.
STEPS = {"dqn": 100_000, "a3c": 200_000, "ppo": 100_000}
SOLVED = 475.0
#: Test episodes start here: the run's evaluations play episodes 0 .. eval_episodes - 1.
TEST_FIRST_EPISODE = 1_000


def seed_list(text: str) -> list[int]:
    """``"100-109"`` or ``"1,2,5"``."""
    if "-" in text and "," not in text:
        low, high = (int(part) for part in text.split("-"))
        return list(range(low, high + 1))
    return [int(s) for s in text.split(",")]


def greedy_mean(algo: str, summary: dict, state_path: Path, episodes: int) -> float:
    """The mean return of the network in ``state_path`` over the test episodes."""
    from mptrain.rl.acting import evaluate_greedy
    from mptrain.rl.config import RLConfig, applicable_rl_settings
    from mptrain.rl.envs import env_shape
    from mptrain.rl.nets import run_network

    config = RLConfig.from_dict(applicable_rl_settings(summary["config"]))
    network = run_network(config, env_shape(config.env))   # dueling or not, as the run's
    network.load_state_dict(torch.load(state_path, weights_only=True))
    network.eval()

    def greedy(obs):
        out = network(obs)
        return (out if algo == "dqn" else out[0]).argmax(-1)

    returns = evaluate_greedy(greedy, config.env,
                              range(TEST_FIRST_EPISODE, TEST_FIRST_EPISODE + episodes))
    return statistics.fmean(returns)


def evaluation_curve(out: Path) -> list[tuple[int, float]]:
    """(environment steps, greedy mean) of each of the run's evaluations, in order."""
    rounds = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [(r["env_steps"], r["eval_return"]) for r in rounds
            if r.get("eval_return") is not None]


def curve_figures(curve: list[tuple[int, float]]) -> dict:
    """Steps to the first evaluation >= 475, and how many of the evaluations from the
    run's second half on hold: a steadier sign of holding than the final draw."""
    first = next((steps for steps, value in curve if value >= SOLVED), None)
    late = [value for steps, value in curve if steps >= curve[-1][0] // 2] if curve else []
    return {"first_solved_at_steps": first, "late_evals": len(late),
            "late_evals_holding": sum(value >= SOLVED for value in late)}


def hold_cell(algo: str, seed: int, flags: list[str], episodes: int, folder: Path) -> dict:
    out = folder / f"{algo}-{seed}"
    summary = rl_run(["--algo", algo, "--workers", "2", "--steps", str(STEPS[algo]),
                      "--seed", str(seed), *flags], out, timeout_s=3_600)
    if "error" in summary:
        print(f"{algo} seed {seed}: failed: {summary['error']}", flush=True)
        return {"algo": algo, "seed": seed, **summary}
    final = greedy_mean(algo, summary, out / "final.pt", episodes)
    best = greedy_mean(algo, summary, out / ("best.pt" if (out / "best.pt").is_file()
                                              else "final.pt"), episodes)
    curve = evaluation_curve(out)
    cell = {"algo": algo, "seed": seed, "final_return": final, "best_return": best,
            "final_holds": final >= SOLVED, "best_holds": best >= SOLVED,
            "final_eval_return": summary["eval_return"],
            "best_eval_return": summary.get("best_eval_return"),
            "best_at_steps": summary.get("best_at_steps"),
            "evaluations": curve, **curve_figures(curve), "wall_s": summary["wall_s"]}
    print(f"{algo} seed {seed}: final {final:.1f}, best {best:.1f} (kept at "
          f"{cell['best_at_steps'] or 0:,} steps, {cell['best_eval_return']} in the run; "
          f"first >= {SOLVED:g} at {cell['first_solved_at_steps']}, "
          f"{cell['late_evals_holding']}/{cell['late_evals']} of the second half's)",
          flush=True)
    return cell


def table_row(algo: str, cells: list[dict]) -> dict:
    done = [c for c in cells if "error" not in c]
    firsts = [c["first_solved_at_steps"] for c in done if c["first_solved_at_steps"]]
    return {"algo": algo, "seeds": len(cells),
            "final_holds": sum(c["final_holds"] for c in done),
            "best_holds": sum(c["best_holds"] for c in done),
            "median_final": statistics.median(c["final_return"] for c in done)
            if done else None,
            "median_best": statistics.median(c["best_return"] for c in done) if done else None,
            "median_first_solved_at_steps": statistics.median(firsts) if firsts else None}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algos", default="dqn,a3c,ppo")
    parser.add_argument("--seeds", default="200-209", help="200-209: the report's")
    parser.add_argument("--flags", default="", help="more mptrain rl flags (a candidate)")
    parser.add_argument("--test-episodes", type=int, default=10)
    parser.add_argument("--steps", type=int, help="every algorithm's --steps (a quick check)")
    parser.add_argument("--jobs", type=int, default=1, help="cells run side by side")
    parser.add_argument("--json", help="write the figures here (auto: "
                        "benchmarks/results/rl-hold-DATE.json)")
    args = parser.parse_args(argv)
    args.json = result_path("rl-hold", args.json)
    algos, seeds, flags = args.algos.split(","), seed_list(args.seeds), args.flags.split()
    if args.steps:
        STEPS.update(dict.fromkeys(STEPS, args.steps))
    results = {"machine": machine_info(), "seeds": seeds, "flags": flags, "steps": STEPS,
               "test_episodes": args.test_episodes}
    with tempfile.TemporaryDirectory(prefix="mptrain-rl-hold-") as temp, \
            ThreadPoolExecutor(args.jobs) as pool:
        jobs = [(algo, seed) for algo in algos for seed in seeds]
        cells = list(pool.map(lambda job: hold_cell(*job, flags, args.test_episodes,
                                                    Path(temp)), jobs))
    rows = [table_row(algo, [c for c in cells if c["algo"] == algo]) for algo in algos]
    results.update(cells=cells, table=rows)
    print(f"{'':6} {'final >= 475':>13} {'best >= 475':>12} {'median final':>13} "
          f"{'median best':>12} {'median first 475':>17}")
    for r in rows:
        print(f"{r['algo']:6} {r['final_holds']:>6}/{r['seeds']:<6} {r['best_holds']:>5}/"
              f"{r['seeds']:<6} {r['median_final'] or 0:>13.1f} {r['median_best'] or 0:>12.1f} "
              f"{r['median_first_solved_at_steps'] or 0:>17,}")
    if args.json:
        write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
