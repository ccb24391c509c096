import pytest
import torch

from mptrain.rl.returns import gae, nstep_returns


def t(values, dtype=torch.float32):
    return torch.tensor(values, dtype=dtype)


def test_nstep_returns_bootstrap_and_episode_end():
    rewards, gamma = t([1.0, 1.0, 1.0, 1.0]), 0.5
    dones = t([False, True, False, False], torch.bool)
    returns = nstep_returns(rewards, dones, bootstrap=8.0, gamma=gamma)
    # Steps 2-3 bootstrap from 8; steps 0-1 stop at the terminal step 1.
    assert returns.tolist() == pytest.approx([1.5, 1.0, 1 + 0.5 * (1 + 0.5 * 8), 1 + 0.5 * 8])


def test_truncation_bootstraps_from_the_cut_state():
    rewards = t([1.0, 1.0, 1.0])
    dones = t([False, False, False], torch.bool)
    cuts = t([False, True, False], torch.bool)
    cut_values = t([0.0, 10.0, 0.0])
    returns = nstep_returns(rewards, dones, 2.0, 0.9, cuts, cut_values)
    assert returns.tolist() == pytest.approx([1 + 0.9 * (1 + 0.9 * 10), 1 + 0.9 * 10,
                                              1 + 0.9 * 2])


@pytest.mark.parametrize("dones", [[False] * 5, [False, False, True, False, False]])
def test_gae_with_lambda_one_is_the_nstep_advantage(dones):
    torch.manual_seed(0)
    rewards, values = torch.rand(5), torch.rand(5)
    dones = t(dones, torch.bool)
    advantages, returns = gae(rewards, values, dones, 0.7, 0.99, 1.0)
    expected = nstep_returns(rewards, dones, 0.7, 0.99)
    assert returns.tolist() == pytest.approx(expected.tolist(), abs=1e-6)
    assert advantages.tolist() == pytest.approx((expected - values).tolist(), abs=1e-6)


def test_gae_with_lambda_zero_is_the_one_step_td_error():
    rewards, values = t([1.0, 2.0, 3.0]), t([0.5, 0.25, 1.0])
    dones = t([False, False, True], torch.bool)
    advantages, _ = gae(rewards, values, dones, 100.0, 0.9, 0.0)
    assert advantages.tolist() == pytest.approx([1 + 0.9 * 0.25 - 0.5, 2 + 0.9 * 1.0 - 0.25,
                                                 3 - 1.0])
