"""What the default evaluations of ``mptrain rl`` cost in wall time (issue 55: at most ~5%
of a CartPole run), with and without the ``--confirm-episodes`` a would-be best policy
plays (dqn's default 20; a3c's and ppo's 0, for what this measures).

    python benchmarks/rl_eval_cost.py [--algo dqn] [--steps 20000] [--repeats 3]

Counted in environment steps the worst case grew: an evaluation of 2 episodes at
CartPole's 500 steps is 1,000 steps per 20,000 trained (5%), and 20 confirming episodes
make it 11,000 (55%). But an evaluation step costs far less than a training step: the
episodes of a rank are played side by side, one batched forward pass per step for all of
them, and nothing learns. So this measures the worst case in seconds: one rank's share of
an evaluation (``--workers 2``: 1 episode, then 10 confirming ones side by side) played to 500
by a balancing controller that also runs the algorithm's built-in network on every batch
(the network's cost, the controller's actions: a policy that never fails, the worst
case), against the wall time of ``--steps`` training steps of the same algorithm with
``--workers 2``, ``--eval-every 0`` (the rounds' time, ``env_steps / env_steps_per_s``). Prints the shares; nothing asserts. Measure on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from rl import rl_run  # noqa: E402

EPISODES, CONFIRMING, WORKERS = 2, 20, 2


def balancing(network):
    """Greedy actions that hold CartPole to the time limit, after the network's forward
    pass on the same batch (its cost is what an evaluation pays)."""
    def act(obs: torch.Tensor) -> torch.Tensor:
        network(obs)
        x, x_dot, theta, theta_dot = obs.unbind(-1)
        return ((theta + 0.5 * theta_dot + 0.05 * x + 0.2 * x_dot) > 0).long()
    return act


def rank_share_s(algo: str, first: int, end: int, repeats: int) -> float:
    """Seconds rank 0 spends on its share of episodes ``first .. end - 1`` (every second
    one: ``GreedyEvaluation``'s split over 2 ranks)."""
    from mptrain.rl.acting import evaluate_greedy
    from mptrain.rl.config import RLConfig
    from mptrain.rl.envs import env_shape
    from mptrain.rl.nets import build_network

    config = RLConfig(algo=algo)
    network = build_network(algo, env_shape(config.env), config.network_width)
    act = balancing(network if algo == "dqn" else (lambda obs: network(obs)[0]))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        returns = evaluate_greedy(act, config.env, range(first, end, WORKERS))
        times.append(time.perf_counter() - start)
        assert min(returns) == 500.0, returns   # the worst case: every episode to the limit
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", default="dqn")
    parser.add_argument("--steps", type=int, default=20_000,
                        help="training steps per evaluation (the default: 2 rounds)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)   # an actor's (threads_per_worker 1)
    with tempfile.TemporaryDirectory(prefix="rl-eval-cost-") as scratch:
        summary = rl_run(["--algo", args.algo, "--workers", str(WORKERS), "--steps",
                          str(args.steps), "--eval-every", "0", "--seed", "0"],
                         Path(scratch) / "run")
    if "error" in summary:
        sys.exit(f"the training run failed: {summary['error']}")
    train_s = summary["env_steps"] / summary["env_steps_per_s"]   # the rounds' own time
    plain = rank_share_s(args.algo, 0, EPISODES, args.repeats)
    confirmed = rank_share_s(args.algo, EPISODES, EPISODES + CONFIRMING, args.repeats)
    figures = {"algo": args.algo, "train_steps": args.steps, "train_wall_s": train_s,
               "evaluation_s": plain, "confirmed_evaluation_s": confirmed,
               "evaluation_share": plain / train_s,
               "confirmed_evaluation_share": (plain + confirmed) / train_s}
    print(f"{args.algo}: {args.steps:,} training steps with --workers {WORKERS} in "
          f"{train_s:.1f} s wall; an evaluation's worst case (every episode to 500), one "
          f"rank's share: {EPISODES} episodes {plain * 1e3:.0f} ms "
          f"({figures['evaluation_share']:.1%}), with {CONFIRMING} confirming episodes "
          f"{(plain + confirmed) * 1e3:.0f} ms ({figures['confirmed_evaluation_share']:.1%})")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
