"""The measure the CartPole baselines share with ``mptrain rl`` and ``benchmarks/rl.py``:
every ``--eval-every`` environment steps, the greedy policy plays ``--eval-episodes``
episodes of CartPole-v1 (gymnasium) reset with seeds 1,000,000 + i -- the episodes mptrain
evaluates on -- and a run counts as solved at the first evaluation whose mean return
reaches 475. Its figures are that evaluation's environment steps and its seconds since the
run began (start-up and every earlier evaluation included, as in mptrain's own figures).
Training throughput leaves the evaluations out (env steps / (wall - evaluation seconds)),
as mptrain's ``env_steps_per_s`` does; so does ``train_s_to_target``, the seconds to 475
less the seconds spent evaluating, which no evaluation's cost can move. Each evaluation is
recorded as [environment steps, greedy mean, seconds since start, evaluation seconds so far].

The evaluation episodes are played side by side, one environment each, with one batched
forward pass per step (``greedy_return``), as ``mptrain rl`` evaluates since 2026-11-27: the
returns are those of the episodes played one at a time (the policy is deterministic and each
episode has its own environment), and both sides pay the same, smaller, price for them, so
the seconds to 475 stay comparable. The baselines' JSON files of 2026-11-27 were measured
with the episodes played one at a time (one forward pass per step of each episode), as
mptrain then evaluated; their ``train_s_to_target`` does not depend on it.

Each run has a wall cap: a run still short of 475 when the cap passes stops there and is
recorded as not solved within the cap (``"stopped": "wall cap"``), so a slow library on a
loaded machine costs a bounded sitting. The JSON keeps the shape ``rl.py --baseline``
reads (that of ``sb3_dqn.py``): ``baseline``, ``cells`` with ``seed``, ``solved``,
``steps_to_target``, ``wall_to_target_s``, ``env_steps``, ``wall_s``.

Torch runs one intra-op thread unless ``--torch-threads`` says otherwise, as each mptrain
worker does: the networks are tiny, and on a shared 2-core machine two OpenMP threads that
wait for each other ran sb3's PPO 20x slower (2026-11-27, load ~5: 116 environment steps/s
with torch's default 2 threads, 2,430 with 1), which would measure the machine's load
rather than the library.

Used by the scripts of this folder only, run with ``.venv-baselines/bin/python``
(``setup.sh``); it imports gymnasium and nothing of mptrain.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from typing import Callable

import gymnasium
import numpy as np

EVAL_SEED = 1_000_000   # as mptrain.rl.acting: the same evaluation episodes
TARGET = 475.0


def greedy_return(act: Callable[[np.ndarray], np.ndarray], episodes: int) -> float:
    """Mean return of ``act`` (observations [n, 4] -> actions [n]) over the evaluation
    episodes, played side by side as ``mptrain.rl.acting.evaluate_greedy`` plays them: one
    environment per episode, one batched forward pass per step for the episodes still
    running, each return counted to its own episode's end."""
    envs = [gymnasium.make("CartPole-v1") for _ in range(episodes)]
    try:
        obs = [env.reset(seed=EVAL_SEED + index)[0] for index, env in enumerate(envs)]
        total, running = 0.0, list(range(episodes))
        while running:
            actions = np.asarray(act(np.stack([obs[i] for i in running]))).tolist()
            still = []
            for i, action in zip(running, actions):
                obs[i], reward, terminated, truncated, _ = envs[i].step(int(action))
                total += float(reward)
                if not (terminated or truncated):
                    still.append(i)
            running = still
    finally:
        for env in envs:
            env.close()
    return total / episodes


class SolveClock:
    """One training run's evaluations, by environment steps and seconds since it began,
    and whether it should stop (solved, or past its wall cap)."""

    def __init__(self, eval_every: int, episodes: int, wall_cap_s: float):
        self.eval_every = eval_every
        self.episodes = episodes
        self.wall_cap_s = wall_cap_s
        self.started = time.monotonic()
        self.next_eval = eval_every
        self.env_steps = 0
        self.eval_s = 0.0
        self.evaluations: list[tuple[int, float, float, float]] = []
        self.stopped = "steps"

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def advance(self, env_steps: int, act: Callable[[np.ndarray], np.ndarray]) -> bool:
        """Record the run at ``env_steps``, evaluate ``act`` when an evaluation is due;
        False when the run should stop."""
        self.env_steps = env_steps
        if env_steps >= self.next_eval:
            while self.next_eval <= env_steps:
                self.next_eval += self.eval_every
            began = time.monotonic()
            mean = greedy_return(act, self.episodes)
            self.eval_s += time.monotonic() - began
            self.evaluations.append((env_steps, mean, round(self.elapsed(), 2),
                                     round(self.eval_s, 2)))
            # An evaluation that ends past the cap does not count: solved within the cap.
            if mean >= TARGET and self.elapsed() <= self.wall_cap_s:
                self.stopped = "target"
                return False
        if self.elapsed() >= self.wall_cap_s:
            self.stopped = "wall cap"
            return False
        return True

    def cell(self, seed: int) -> dict:
        solved = self.evaluations[-1] if self.stopped == "target" else None
        wall = self.elapsed()
        train_s = wall - self.eval_s
        return {"seed": seed, "solved": solved is not None,
                "steps_to_target": solved[0] if solved else None,
                "wall_to_target_s": solved[2] if solved else None,
                "train_s_to_target": round(solved[2] - solved[3], 2) if solved else None,
                "env_steps": self.env_steps, "wall_s": round(wall, 2),
                "eval_s": round(self.eval_s, 2),
                "env_steps_per_s": round(self.env_steps / train_s, 1) if train_s > 0 else None,
                "stopped": self.stopped, "wall_cap_s": self.wall_cap_s,
                "evaluations": self.evaluations}


def learn_measured(model, greedy: Callable[[np.ndarray], np.ndarray], clock: SolveClock,
                   steps: int) -> None:
    """Train a stable-baselines3 ``model`` for at most ``steps``, ``clock`` evaluating
    ``greedy`` after each of its steps (and stopping it when solved or past the cap)."""
    from stable_baselines3.common.callbacks import BaseCallback

    class Measure(BaseCallback):
        def _on_step(self) -> bool:
            return clock.advance(self.num_timesteps, greedy)

    model.learn(total_timesteps=steps, callback=Measure())
    clock.env_steps = model.num_timesteps


def arguments(description: str, steps: int) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--seeds", default="1,2,3", help="comma-separated, one run each")
    parser.add_argument("--steps", type=int, default=steps,
                        help=f"environment steps at most per run (default {steps:,})")
    parser.add_argument("--eval-every", type=int, default=5_000,
                        help="environment steps between greedy evaluations")
    parser.add_argument("--eval-episodes", type=int, default=100)
    parser.add_argument("--wall-cap-s", type=float, default=600.0,
                        help="stop a run still short of 475 after this many seconds; it "
                        "counts as not solved within the cap")
    parser.add_argument("--torch-threads", type=int, default=1,
                        help="torch intra-op threads (default 1: see the module docstring)")
    parser.add_argument("--json", help="write the cells and summary here")
    args = parser.parse_args()
    args.loadavg_at_start = os.getloadavg()
    try:
        args.seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        parser.error(f"--seeds {args.seeds!r}: give whole numbers separated by commas")
    for name in ("steps", "eval_every", "eval_episodes", "wall_cap_s", "torch_threads"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    import torch

    torch.set_num_threads(args.torch_threads)
    return args


def line(name: str, cell: dict) -> str:
    if cell["solved"]:
        result = (f"475 at {cell['steps_to_target']:,} steps, "
                  f"{cell['wall_to_target_s']:.1f} s")
    else:
        best = max((e[1] for e in cell["evaluations"]), default=None)
        result = (f"not solved: stopped by the {cell['stopped']} at "
                  f"{cell['env_steps']:,} steps, {cell['wall_s']:.0f} s"
                  + (f" (best greedy mean {best:.1f})" if best is not None else ""))
    return f"{name} seed {cell['seed']}: {result} · {cell['env_steps_per_s']} steps/s"


def finish(name: str, cells: list[dict], args: argparse.Namespace, **facts) -> None:
    """Print the summary line; write the JSON ``rl.py --baseline`` reads."""
    import torch

    solved = [c for c in cells if c["solved"]]
    summary = {"seeds_solved": len(solved), "seeds": len(cells),
               "median_steps_to_target": statistics.median(
                   c["steps_to_target"] for c in solved) if solved else None,
               "median_wall_to_target_s": statistics.median(
                   c["wall_to_target_s"] for c in solved) if solved else None,
               "median_train_s_to_target": statistics.median(
                   c["train_s_to_target"] for c in solved) if solved else None}
    print(f"{name}: {summary['seeds_solved']}/{summary['seeds']} solved; median "
          f"{summary['median_steps_to_target']} steps, {summary['median_wall_to_target_s']} s"
          f" (torch threads {torch.get_num_threads()})", flush=True)
    if args.json:
        data = {**facts, "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
                "python": platform.python_version(),
                "usable_cores": len(os.sched_getaffinity(0)),
                "loadavg_at_start": args.loadavg_at_start, "loadavg_at_end": os.getloadavg(),
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "measure": {"eval_every": args.eval_every, "eval_episodes": args.eval_episodes,
                            "target": TARGET, "wall_cap_s": args.wall_cap_s,
                            "steps": args.steps},
                "cells": cells, **summary}
        with open(args.json, "w") as out:
            json.dump(data, out, indent=2)
            out.write("\n")
