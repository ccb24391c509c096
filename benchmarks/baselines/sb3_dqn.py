"""stable-baselines3's DQN with rl-baselines3-zoo's CartPole-v1 hyperparameters: the baseline
that ``mptrain rl --algo dqn`` (whose defaults are the same hyperparameters) is compared with.

    pip install stable-baselines3        # not a dependency of mptrain
    python benchmarks/baselines/sb3_dqn.py --seeds 0,1,2 [--json out.json]

Each seed trains one process (sb3's DQN, one environment, torch's default threads) and
every ``--eval-every`` environment steps plays ``--eval-episodes`` greedy episodes on the
seeds ``mptrain rl`` evaluates on; it stops at the first evaluation whose mean reaches 475
and reports that evaluation's environment steps and its seconds since training began
(earlier evaluations included, as in ``mptrain rl``'s own figures). Prints one line per
seed and the median; writes JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import gymnasium
import torch

EVAL_SEED = 1_000_000   # as mptrain.rl.acting: the same evaluation episodes
TARGET = 475.0

#: rl-baselines3-zoo, hyperparams/dqn.yml, CartPole-v1 (n_timesteps 5e4)
ZOO = dict(learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000,
           gamma=0.99, target_update_interval=10, train_freq=256, gradient_steps=128,
           exploration_fraction=0.16, exploration_final_eps=0.04,
           policy_kwargs=dict(net_arch=[256, 256]))
ZOO_TIMESTEPS = 50_000


def greedy_return(model, episodes: int) -> float:
    env = gymnasium.make("CartPole-v1")
    total = 0.0
    for index in range(episodes):
        obs, _ = env.reset(seed=EVAL_SEED + index)
        ended = False
        while not ended:
            action, _ = model.predict(obs, deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(int(action))
            total += float(reward)
            ended = terminated or truncated
    env.close()
    return total / episodes


def solve(seed: int, steps: int, eval_every: int, episodes: int) -> dict:
    from stable_baselines3 import DQN
    from stable_baselines3.common.callbacks import BaseCallback

    class StopAtTarget(BaseCallback):
        def __init__(self):
            super().__init__()
            self.started = time.monotonic()
            self.evaluations: list[tuple[int, float, float]] = []

        def _on_step(self) -> bool:
            if self.num_timesteps % eval_every:
                return True
            mean = greedy_return(self.model, episodes)
            self.evaluations.append((self.num_timesteps, mean,
                                     time.monotonic() - self.started))
            return mean < TARGET

    env = gymnasium.make("CartPole-v1")
    model = DQN("MlpPolicy", env, seed=seed, verbose=0, device="cpu", **ZOO)
    stop = StopAtTarget()
    model.learn(total_timesteps=steps, callback=stop)
    solved = [e for e in stop.evaluations if e[1] >= TARGET]
    return {"seed": seed, "solved": bool(solved),
            "steps_to_target": solved[0][0] if solved else None,
            "wall_to_target_s": round(solved[0][2], 2) if solved else None,
            "env_steps": model.num_timesteps,
            "wall_s": round(time.monotonic() - stop.started, 2),
            "evaluations": stop.evaluations}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2,3,4,5,6,7,8,9")
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--eval-every", type=int, default=5_000)
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--json")
    args = parser.parse_args()
    cells = []
    for seed in (int(s) for s in args.seeds.split(",")):
        cell = solve(seed, args.steps, args.eval_every, args.eval_episodes)
        cells.append(cell)
        print(f"sb3 dqn seed {seed}: " + (
            f"475 at {cell['steps_to_target']:,} steps, {cell['wall_to_target_s']:.1f} s"
            if cell["solved"] else f"not solved in {cell['env_steps']:,} steps"), flush=True)
    solved = [c for c in cells if c["solved"]]
    summary = {"seeds_solved": len(solved), "seeds": len(cells),
               "median_steps_to_target": statistics.median(
                   c["steps_to_target"] for c in solved) if solved else None,
               "median_wall_to_target_s": statistics.median(
                   c["wall_to_target_s"] for c in solved) if solved else None}
    print(f"sb3 dqn: {summary['seeds_solved']}/{summary['seeds']} solved; median "
          f"{summary['median_steps_to_target']} steps, {summary['median_wall_to_target_s']} s"
          f" (torch threads {torch.get_num_threads()})")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"baseline": "stable-baselines3 DQN, rl-baselines3-zoo CartPole-v1",
                       "hyperparameters": {**ZOO, "policy_kwargs": str(ZOO["policy_kwargs"])},
                       "torch_threads": torch.get_num_threads(), "cells": cells,
                       **summary}, out, indent=2)


if __name__ == "__main__":
    main()
