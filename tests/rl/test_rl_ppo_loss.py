"""PPO's pure parts: a segment's GAE, the clipped surrogate, the value loss."""

import pytest
import torch
import torch.nn as nn

from mptrain.rl.ppo_loss import (clipped_surrogate, normalized, ppo_loss, segment_gae,
                                 value_loss)


def test_segment_gae_matches_a_hand_computed_example():
    # Two environments (columns), three steps, gamma = lambda = 0.5.
    rewards = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 2.0]])
    values = torch.tensor([[0.5, 1.0], [1.0, 1.0], [2.0, 1.0]])
    dones = torch.tensor([[False, False], [True, False], [False, False]])
    bootstrap = torch.tensor([4.0, 0.0])
    advantages, returns = segment_gae(rewards, values, dones, bootstrap, 0.5, 0.5)
    # env 0: t=2 delta 1 + .5*4 - 2 = 1; t=1 ends its episode: delta 1 - 1 = 0, nothing
    # after it; t=0 delta 1 + .5*1 - .5 = 1, plus .25 * 0.
    # env 1: t=2 delta 2 + .5*0 - 1 = 1; t=1 delta .5*1 - 1 = -.5, A = -.5 + .25*1 = -.25;
    # t=0 delta -.5, A = -.5 + .25*(-.25) = -.5625.
    assert advantages.tolist() == [[1.0, -0.5625], [0.0, -0.25], [1.0, 1.0]]
    assert returns.tolist() == [[1.5, 0.4375], [1.0, 0.75], [3.0, 2.0]]


def test_the_surrogate_at_ratio_one_is_minus_the_mean_advantage():
    advantages = torch.tensor([1.0, -2.0, 0.5])
    assert float(clipped_surrogate(torch.ones(3), advantages, 0.2)) == pytest.approx(0.5 / 3)


@pytest.mark.parametrize("ratio, advantage, moves", [
    (1.5, 1.0, False),    # already past 1 + clip where the advantage pushes it: no gradient
    (0.5, -1.0, False),   # past 1 - clip for a negative advantage: no gradient
    (0.5, 1.0, True),     # below 1 - clip with a positive advantage: still pulled back
    (1.5, -1.0, True),    # above 1 + clip with a negative advantage: still pulled back
    (1.1, 1.0, True),     # inside the clip range: the plain surrogate's gradient
])
def test_the_clip_removes_the_gradient_only_where_the_advantage_gains(ratio, advantage, moves):
    r = torch.tensor([ratio], requires_grad=True)
    clipped_surrogate(r, torch.tensor([advantage]), 0.2).backward()
    assert (float(r.grad) != 0.0) is moves


def test_the_surrogate_is_a_pessimistic_bound():
    generator = torch.Generator().manual_seed(0)
    ratio = torch.rand(1000, generator=generator) * 2
    advantages = torch.randn(1000, generator=generator)
    for clip in (0.1, 0.2, 0.3):
        per_sample = [float(clipped_surrogate(ratio[i:i + 1], advantages[i:i + 1], clip))
                      for i in range(0, 1000, 97)]
        plain = [-float(ratio[i] * advantages[i]) for i in range(0, 1000, 97)]
        assert all(c >= p - 1e-6 for c, p in zip(per_sample, plain))
    assert float(clipped_surrogate(ratio, advantages, 1e9)) == \
        pytest.approx(-float((ratio * advantages).mean()), rel=1e-5)


def test_value_clipping_takes_the_larger_error_and_none_is_half_the_mse():
    returns, old = torch.tensor([1.0, 1.0]), torch.tensor([0.0, 0.0])
    values = torch.tensor([0.9, -0.1])
    assert float(value_loss(values, returns, old, None)) == \
        pytest.approx(0.5 * (0.01 + 1.21) / 2)
    # values moved at most 0.2 from old: 0.9 -> 0.2 (error 0.64 > 0.01); -0.1 stays
    assert float(value_loss(values, returns, old, 0.2)) == pytest.approx(0.5 * (0.64 + 1.21) / 2)


def test_normalized_advantages_have_zero_mean_and_unit_std():
    out = normalized(torch.tensor([1.0, 2.0, 3.0, 10.0]))
    assert float(out.mean()) == pytest.approx(0.0, abs=1e-6)
    assert float(out.std()) == pytest.approx(1.0, rel=1e-5)
    assert torch.isfinite(normalized(torch.ones(4))).all()


class Fixed(nn.Module):
    def __init__(self, logits, values):
        super().__init__()
        self.logits = nn.Parameter(logits)
        self.values = nn.Parameter(values)

    def forward(self, obs):
        return self.logits, self.values


def test_the_loss_of_the_acting_policy_has_no_kl_and_nothing_clipped():
    logits, values = torch.tensor([[0.0, 1.0], [2.0, 0.0]]), torch.tensor([0.5, 0.2])
    actions = torch.tensor([1, 0])
    old = torch.log_softmax(logits, -1).gather(1, actions.unsqueeze(1)).squeeze(1)
    kwargs = dict(clip=0.2, clip_value=True, normalize=False, entropy_coef=0.01,
                  value_coef=0.5)
    result = ppo_loss(Fixed(logits, values), torch.zeros(2, 1), actions, old, values,
                      torch.tensor([1.0, -1.0]), torch.tensor([1.0, 0.0]), **kwargs)
    assert result.approx_kl == 0.0 and result.clip_fraction == 0.0
    assert result.policy == pytest.approx(0.0)     # ratio 1: minus the mean advantage
    assert result.value == pytest.approx(0.5 * (0.25 + 0.04) / 2)
    assert float(result.loss.detach()) == pytest.approx(result.policy - 0.01 * result.entropy
                                               + 0.5 * result.value)
    moved = ppo_loss(Fixed(logits + torch.tensor([[0.0, 3.0], [0.0, 0.0]]), values),
                     torch.zeros(2, 1), actions, old, values, torch.tensor([1.0, -1.0]),
                     torch.tensor([1.0, 0.0]), **kwargs)
    assert moved.approx_kl > 0 and moved.clip_fraction == 0.5
