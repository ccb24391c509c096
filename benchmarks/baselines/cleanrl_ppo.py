"""CleanRL's ``ppo.py`` (the ``cleanrl`` package 1.2.0 from PyPI, run unmodified) on
CartPole-v1 with its defaults: a baseline ``mptrain rl --algo ppo`` is compared with (issue 42).

    bash benchmarks/baselines/setup.sh      # .venv-baselines; not a dependency of mptrain
    .venv-baselines/bin/python benchmarks/baselines/cleanrl_ppo.py --seeds 1,2,3 \\
        --wall-cap-s 600 --json cleanrl-ppo.json

Its defaults: 4 environments (``gym.vector.SyncVectorEnv``, one process), 128 steps each per
rollout, 4 epochs of 4 minibatches, Adam 2.5e-4 annealed to 0 over 500,000 steps, gamma
0.99, GAE lambda 0.95, clip 0.2 with value clipping, entropy 0.01, 64-64 tanh networks.
The only arguments passed are ``--seed S`` and ``--total-timesteps`` (``--steps``, default
500,000: its own default, so its learning-rate annealing is its own).

How it is run without changing its code: this script imports nothing of CleanRL's; it sets
``sys.argv`` and runs the module ``cleanrl.ppo`` as ``__main__`` (``runpy``) in a scratch
folder (its TensorBoard ``runs/`` goes there, its per-episode prints to /dev/null), after
replacing ``gym.vector.SyncVectorEnv`` -- which ``ppo.py`` looks up when it builds its
environments -- by a subclass that counts environment steps. At each ``--eval-every``
environment steps (all 4 environments counted) that subclass's ``step`` reads the ``agent``
the script is training from the script's globals (the frame of the ``envs.step`` call) and
plays 100 greedy episodes with it: the action is the argmax of ``agent.actor``'s logits,
the mode of the Categorical the script samples from. When the mean reaches 475, or the wall
cap passes, ``step`` raises and the run ends there. Nothing else of the run changes: the
evaluation uses its own gymnasium environment and draws no random numbers, so the training
sees the same numbers it would have seen without the measure (checked once: after 4,096
steps of seed 7 the agent's parameters were bit for bit the same with an evaluation every
512 steps and with none).

How this measure differs from CleanRL's: CleanRL reports ``charts/episodic_return``, the
return of each finished episode of the stochastic training policy (sampled actions, from the
4 training environments, while the policy changes within the episode); ours is the greedy
policy frozen at one moment, over the same 100 held-out episodes (seeds 1,000,000 + i of
gymnasium's CartPole-v1) as ``mptrain rl`` and ``sb3_ppo.py``. CleanRL trains on the old
``gym`` 0.23.1 CartPole-v1 (same dynamics, 500-step limit); evaluations are on gymnasium's.
Time starts before the module runs (its imports and set-up included, as ``mptrain rl``'s
start-up is); time spent evaluating counts in the seconds to 475 but not in steps/s.
"""

from __future__ import annotations

import contextlib
import os
import runpy
import sys
import tempfile
from importlib.util import find_spec

import torch

from greedy_measure import SolveClock, arguments, finish, line

DEFAULT_STEPS = 500_000   # ppo.py's --total-timesteps default


class StopRun(Exception):
    """Raised from inside ppo.py's training loop: solved, or past the wall cap."""


def script_path() -> str:
    spec = find_spec("cleanrl.ppo")
    if spec is None or spec.origin is None:
        sys.exit("cleanrl is not installed here: run benchmarks/baselines/setup.sh and use "
                 ".venv-baselines/bin/python")
    return spec.origin


def measured_vector_env(clock: SolveClock, script: str, seen: dict):
    """gym's SyncVectorEnv, counting steps and evaluating the script's agent when due."""
    import gym

    class MeasuredSyncVectorEnv(gym.vector.SyncVectorEnv):
        def step(self, actions):
            result = super().step(actions)
            frame = sys._getframe(1)
            while frame is not None and frame.f_code.co_filename != script:
                frame = frame.f_back
            if frame is None:
                raise RuntimeError("SyncVectorEnv.step was not called from cleanrl's ppo.py")
            seen["globals"] = frame.f_globals
            agent = frame.f_globals["agent"]

            def greedy(obs):
                # a batch of observations (greedy_measure plays the episodes side by side)
                with torch.no_grad():
                    logits = agent.actor(torch.as_tensor(obs, dtype=torch.float32))
                return logits.argmax(-1).numpy()

            if not clock.advance(clock.env_steps + self.num_envs, greedy):
                raise StopRun
            return result

    return gym, MeasuredSyncVectorEnv


def solve(seed: int, args) -> tuple[dict, dict]:
    """One run's cell, and the settings ppo.py parsed for it."""
    script = script_path()
    clock = SolveClock(args.eval_every, args.eval_episodes, args.wall_cap_s)
    seen: dict = {}
    gym, measured = measured_vector_env(clock, script, seen)
    original, argv, cwd = gym.vector.SyncVectorEnv, sys.argv, os.getcwd()
    with tempfile.TemporaryDirectory(prefix="cleanrl-ppo-") as scratch, \
            open(os.devnull, "w") as quiet:
        gym.vector.SyncVectorEnv = measured
        sys.argv = [script, "--seed", str(seed), "--total-timesteps", str(args.steps)]
        os.chdir(scratch)
        try:
            with contextlib.redirect_stdout(quiet):
                runpy.run_module("cleanrl.ppo", run_name="__main__")
        except StopRun:
            # The script stopped mid-loop: close what it would have closed at its end.
            for name in ("envs", "writer"):
                if name in seen.get("globals", {}):
                    seen["globals"][name].close()
        finally:
            gym.vector.SyncVectorEnv, sys.argv = original, argv
            os.chdir(cwd)
    settings = {key: value for key, value in vars(seen["globals"]["args"]).items()
                if isinstance(value, (int, float, str, bool, type(None)))}
    return clock.cell(seed), settings


def main() -> None:
    args = arguments(__doc__.splitlines()[0], DEFAULT_STEPS)
    cells, settings = [], {}
    for seed in args.seeds:
        cell, settings = solve(seed, args)
        cells.append(cell)
        print(line("cleanrl ppo", cell), flush=True)
    from importlib.metadata import version

    finish("cleanrl ppo", cells, args,
           baseline="CleanRL ppo.py 1.2.0 (its defaults)",
           library=f"cleanrl {version('cleanrl')} (ppo.py unmodified), gym {version('gym')}",
           hyperparameters={**settings, "seed": "per cell"})


if __name__ == "__main__":
    main()
