"""The algorithms learn CartPole, checked on deterministic runs so the test cannot flake.

DQN's and PPO's runs are fixed by their seed whatever the number of processes
(``rl/dqn.py``, ``rl/ppo.py``); a3c's with one worker (with more, Hogwild's races make each
run its own). The thresholds are
returns that DQN as it was on main b8e2fa0 did not reach at the same step count: 97, 127
and 79 for seed 3 at 10,000 steps (one run with one worker, two with two), where this DQN
reaches 367 on this machine's float kernels; a3c reaches 468 at 20,000 steps. PPO with two
actors reaches 478 at 12,288 steps with its defaults of 2026-11-27 (2 x 8 environments, 10
epochs, Adam 2e-3, gamma 0.99, GAE lambda 0.95; 432 with the zoo's 1e-3, 0.98 and 0.8 it had
before; seed 3; random actions score about 22).
"""

import pytest

pytest.importorskip("gymnasium")

from mptrain.rl import fit  # noqa: E402


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_dqn_with_two_workers_learns_within_10_000_steps():
    # A greedy untrained network holds the pole ~10 steps. At 10,000 steps (epsilon still
    # falling) seeds 0-4 gave 83-155 on one CPU; seed 3 gave 300+ on another (oneDNN picks
    # kernels by CPU, and the last bits steer the run): the bar is learning, not solving,
    # which benchmarks/rl.py measures over seeds.
    result = fit("CartPole-v1", "dqn", workers=2, steps=10_000, round_steps=5_000, seed=3,
                 eval_episodes=10)
    assert result.eval_return >= 60


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a3c_reaches_400_within_20_000_steps():
    result = fit("CartPole-v1", "a3c", workers=1, steps=20_000, round_steps=5_000, seed=1,
                 eval_episodes=5)
    assert result.eval_return >= 400


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ppo_with_two_actors_reaches_300_within_12_000_steps():
    result = fit("CartPole-v1", "ppo", workers=2, steps=12_000, round_steps=4_000, seed=3,
                 eval_episodes=10)
    assert result.summary["env_steps"] == 12_288   # whole rollouts of 2 x 8 x 32 steps
    assert result.eval_return >= 300
    training = [row.extras["return_mean"] for row in result.rounds]
    assert training[-1] > 3 * training[0]
