"""The one optimizer step a3c and dqn share with the supervised strategies."""

import torch
import torch.nn as nn

from mptrain.engine.step import step_on_loss


def test_a_step_on_a_loss_is_zero_backward_clip_step():
    torch.manual_seed(0)
    model, twin = nn.Linear(3, 2), nn.Linear(3, 2)
    twin.load_state_dict(model.state_dict())
    inputs = torch.randn(8, 3) * 100   # large gradients: the clip bites
    mine = torch.optim.Adam(model.parameters(), lr=0.1)
    by_hand = torch.optim.Adam(twin.parameters(), lr=0.1)
    for _ in range(3):   # stale gradients must not add up
        step_on_loss(mine, model(inputs).pow(2).mean(), max_grad_norm=1.0)
        by_hand.zero_grad()
        twin(inputs).pow(2).mean().backward()
        assert torch.nn.utils.clip_grad_norm_(twin.parameters(), 1.0) > 1.0
        by_hand.step()
    for a, b in zip(model.parameters(), twin.parameters()):
        assert torch.equal(a, b)
