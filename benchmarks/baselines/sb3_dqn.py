"""stable-baselines3's DQN with rl-baselines3-zoo's CartPole-v1 hyperparameters: the baseline
that ``mptrain rl --algo dqn`` (whose defaults are the same hyperparameters) is compared with.

    bash benchmarks/baselines/setup.sh      # .venv-baselines: sb3, torch 2.13.0 (CPU)
    .venv-baselines/bin/python benchmarks/baselines/sb3_dqn.py --seeds 0,1,2 [--json out.json]

Each seed trains one process (sb3's DQN, one environment, one torch thread unless
``--torch-threads`` says otherwise) measured as ``greedy_measure`` measures every baseline:
every ``--eval-every`` environment steps the greedy policy (the argmax of the Q-network, what
``predict(deterministic=True)`` returns) plays the evaluation episodes ``mptrain rl`` plays,
side by side; the run stops at the first mean >= 475 or past ``--wall-cap-s``.
"""

from __future__ import annotations

import torch

from greedy_measure import SolveClock, arguments, finish, learn_measured, line

#: rl-baselines3-zoo, hyperparams/dqn.yml, CartPole-v1 (n_timesteps 5e4)
ZOO = dict(learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000,
           gamma=0.99, target_update_interval=10, train_freq=256, gradient_steps=128,
           exploration_fraction=0.16, exploration_final_eps=0.04,
           policy_kwargs=dict(net_arch=[256, 256]))
ZOO_TIMESTEPS = 50_000
#: The run's budget, as mptrain's dqn has it. learn() is given these steps, so the
#: exploration fraction spans 16k steps where the zoo's 50k run spans 8k (as every earlier
#: sitting of this script ran it).
STEPS = 100_000


def solve(seed: int, args) -> dict:
    import gymnasium
    from stable_baselines3 import DQN

    clock = SolveClock(args.eval_every, args.eval_episodes, args.wall_cap_s)
    model = DQN("MlpPolicy", gymnasium.make("CartPole-v1"), seed=seed, verbose=0,
                device="cpu", **ZOO)
    q_net = model.policy.q_net

    def greedy(obs):
        with torch.no_grad():
            return q_net(torch.as_tensor(obs, dtype=torch.float32)).argmax(-1).numpy()

    learn_measured(model, greedy, clock, args.steps)
    return clock.cell(seed)


def main() -> None:
    args = arguments(__doc__.splitlines()[0], STEPS)
    cells = []
    for seed in args.seeds:
        cells.append(solve(seed, args))
        print(line("sb3 dqn", cells[-1]), flush=True)
    import stable_baselines3

    finish("sb3 dqn", cells, args,
           baseline="stable-baselines3 DQN (zoo hyperparameters)",
           library=f"stable-baselines3 {stable_baselines3.__version__}",
           hyperparameters={**ZOO, "policy_kwargs": str(ZOO["policy_kwargs"]),
                            "learn_steps": args.steps})


if __name__ == "__main__":
    main()
