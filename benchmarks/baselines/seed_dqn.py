"""The seed's DQN agent as a plain single-process script: the baseline for ``mptrain rl
--algo dqn``.

    python benchmarks/baselines/seed_dqn.py --steps 100000 --seed 0 [--json out.json]

What the seed did, kept as it was: a network with two hidden layers, epsilon-greedy actions,
and after every environment step one Adam step on the MSE between Q(s, a) and the TD target
r + gamma * max_a' Q(s', a') computed with the *same* network -- no replay buffer (it learns
from each single transition once, in order) and no target network. The seed used ``gym``;
this uses its successor ``gymnasium`` with the same CartPole-v1, and treats a time-limit
truncation as not terminal (the seed's ``done`` made it terminal).

At the end: the greedy policy's mean return over 100 evaluation episodes (the seeds
``mptrain rl`` evaluates on), and every ``--eval-every`` steps as well.

Reference for sample efficiency: CleanRL's DQN (replay buffer, target network) reports
488.69 +- 16.11 on CartPole-v1 after 500k steps (CleanRL docs, dqn.py benchmark, 3 seeds).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import gymnasium
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

EVAL_SEED = 1_000_000   # as mptrain.rl.acting: the same evaluation episodes


def make_network(obs_dim: int, n_actions: int, hidden: int = 128) -> nn.Module:
    return nn.Sequential(nn.Linear(obs_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                         nn.ReLU(), nn.Linear(hidden, n_actions))


@torch.no_grad()
def greedy_return(net: nn.Module, episodes: int) -> list[float]:
    env = gymnasium.make("CartPole-v1")
    returns = []
    for index in range(episodes):
        obs, _ = env.reset(seed=EVAL_SEED + index)
        total, ended = 0.0, False
        while not ended:
            action = int(net(torch.as_tensor(obs, dtype=torch.float32)).argmax())
            obs, reward, terminated, truncated, _ = env.step(action)
            total += reward
            ended = terminated or truncated
        returns.append(total)
    return returns


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--gamma", type=float, default=0.99)
    parser.add_argument("--eps-steps", type=int, default=10_000)
    parser.add_argument("--eval-every", type=int, default=20_000)
    parser.add_argument("--eval-episodes", type=int, default=100)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    rng = np.random.default_rng(args.seed)
    env = gymnasium.make("CartPole-v1")
    net = make_network(env.observation_space.shape[0], env.action_space.n)
    optimizer = torch.optim.Adam(net.parameters(), lr=args.lr)
    obs, _ = env.reset(seed=args.seed)
    started, evaluations, episode_return, returns = time.monotonic(), [], 0.0, []
    for step in range(1, args.steps + 1):
        epsilon = max(0.05, 1.0 - 0.95 * step / args.eps_steps)
        state = torch.as_tensor(obs, dtype=torch.float32)
        q = net(state)
        action = int(rng.integers(env.action_space.n)) if rng.random() < epsilon \
            else int(q.argmax())
        obs, reward, terminated, truncated, _ = env.step(action)
        with torch.no_grad():  # the same network gives the target: no target network
            next_q = 0.0 if terminated else \
                net(torch.as_tensor(obs, dtype=torch.float32)).max()
            target = reward + args.gamma * next_q
        loss = F.mse_loss(q[action], torch.as_tensor(target, dtype=torch.float32))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()   # one transition, used once: no replay
        episode_return += reward
        if terminated or truncated:
            returns.append(episode_return)
            episode_return = 0.0
            obs, _ = env.reset()
        if step % args.eval_every == 0 or step == args.steps:
            greedy = greedy_return(net, args.eval_episodes)
            evaluations.append({"steps": step, "seconds": time.monotonic() - started,
                                "greedy_mean": statistics.fmean(greedy),
                                "greedy_std": statistics.pstdev(greedy),
                                "recent_training_return": statistics.fmean(returns[-100:])
                                if returns else None})
            print(f"step {step:,}: greedy {evaluations[-1]['greedy_mean']:.1f} +- "
                  f"{evaluations[-1]['greedy_std']:.1f} over {args.eval_episodes} episodes "
                  f"({evaluations[-1]['seconds']:.0f} s)", flush=True)
    result = {"seed": args.seed, "steps": args.steps, "evaluations": evaluations,
              "solved": any(e["greedy_mean"] >= 475 for e in evaluations),
              "cleanrl_reference": "488.69 +- 16.11 after 500k steps (CleanRL dqn.py)",
              "torch": torch.__version__}
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
