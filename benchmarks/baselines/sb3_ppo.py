"""stable-baselines3's PPO with rl-baselines3-zoo's CartPole-v1 hyperparameters: a baseline
``mptrain rl --algo ppo`` is compared with (issue 42).

    bash benchmarks/baselines/setup.sh      # .venv-baselines; not a dependency of mptrain
    .venv-baselines/bin/python benchmarks/baselines/sb3_ppo.py --seeds 1,2,3 \\
        --wall-cap-s 600 --json sb3-ppo.json
    python benchmarks/rl.py --seeds 1,2,3 --baseline sb3-ppo.json   # beside mptrain's rows

The zoo's tuned entry (hyperparams/ppo.yml, CartPole-v1): 8 environments in one process
(sb3's DummyVecEnv, as the zoo's default), 32 steps each per rollout, 20 epochs of minibatch
256, gamma 0.98, GAE lambda 0.8, no entropy bonus, learning rate and clip range falling
linearly from 1e-3 and 0.2 to 0 over the zoo's 100,000 steps; the rest sb3's defaults
(64-64 tanh networks, advantage normalisation, no value clipping). The linear schedules
reach 0 at ``--steps``, so keep its default to run the zoo's schedule. Env i of seed S is
seeded S + i (``make_vec_env``), the model with S.

The measure is ``greedy_measure.py``'s, the same as ``mptrain rl``'s: a callback sees every
vectorised step; every ``--eval-every`` environment steps (all 8 environments counted) it
plays 100 greedy episodes (the mode of sb3's action distribution, the policy as it stands
after its last update) and stops training at the first mean >= 475 or past the wall cap.
One process, torch's default threads.
"""

from __future__ import annotations

import torch

from greedy_measure import SolveClock, arguments, finish, learn_measured, line

#: rl-baselines3-zoo, hyperparams/ppo.yml, CartPole-v1 (n_timesteps 1e5); the two "lin_"
#: entries are built in ``zoo_model``.
ZOO = dict(n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20, ent_coef=0.0)
ZOO_ENVS = 8
ZOO_LEARNING_RATE = 1e-3   # lin_0.001
ZOO_CLIP_RANGE = 0.2       # lin_0.2
ZOO_TIMESTEPS = 100_000


def zoo_model(seed: int):
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.utils import LinearSchedule

    env = make_vec_env("CartPole-v1", n_envs=ZOO_ENVS, seed=seed)
    # The zoo's lin_X is X * progress_remaining: LinearSchedule from X to 0 over all of it.
    return PPO("MlpPolicy", env, seed=seed, verbose=0, device="cpu",
               learning_rate=LinearSchedule(ZOO_LEARNING_RATE, 0.0, 1.0),
               clip_range=LinearSchedule(ZOO_CLIP_RANGE, 0.0, 1.0), **ZOO)


def solve(seed: int, args) -> dict:

    clock = SolveClock(args.eval_every, args.eval_episodes, args.wall_cap_s)
    model = zoo_model(seed)

    policy = model.policy

    def greedy(obs):
        # The argmax of the policy's logits: what predict(deterministic=True) returns (the
        # Categorical's mode), without building the distribution at every step, so that
        # evaluating costs sb3 what it costs CleanRL (its actor's argmax) and mptrain.
        with torch.no_grad():
            # a batch of observations (greedy_measure plays the episodes side by side)
            batch = torch.as_tensor(obs, dtype=torch.float32)
            features = policy.extract_features(batch, policy.pi_features_extractor)
            return policy.action_net(
                policy.mlp_extractor.forward_actor(features)).argmax(-1).numpy()

    learn_measured(model, greedy, clock, args.steps)
    return clock.cell(seed)


def main() -> None:
    args = arguments(__doc__.splitlines()[0], ZOO_TIMESTEPS)
    cells = []
    for seed in args.seeds:
        cells.append(solve(seed, args))
        print(line("sb3 ppo", cells[-1]), flush=True)
    import stable_baselines3

    finish("sb3 ppo", cells, args,
           baseline="stable-baselines3 PPO (zoo hyperparameters)",
           library=f"stable-baselines3 {stable_baselines3.__version__}",
           hyperparameters={**ZOO, "n_envs": ZOO_ENVS,
                            "learning_rate": f"linear {ZOO_LEARNING_RATE} -> 0",
                            "clip_range": f"linear {ZOO_CLIP_RANGE} -> 0",
                            "schedule_steps": args.steps})


if __name__ == "__main__":
    main()
