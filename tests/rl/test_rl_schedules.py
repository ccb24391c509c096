import copy

import pytest
import torch
import torch.nn as nn

from mptrain.errors import UserError
from mptrain.rl.schedules import linear_epsilon, update_target


def test_epsilon_falls_linearly_then_stays():
    assert linear_epsilon(0, 1.0, 0.1, 100) == 1.0
    assert linear_epsilon(50, 1.0, 0.1, 100) == pytest.approx(0.55)
    assert linear_epsilon(100, 1.0, 0.1, 100) == 0.1
    assert linear_epsilon(10_000, 1.0, 0.1, 100) == 0.1
    assert linear_epsilon(5, 1.0, 0.1, 0) == 0.1


def test_hard_target_update_copies_and_decouples():
    online = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    target = copy.deepcopy(online)
    with torch.no_grad():
        for p in online.parameters():
            p.add_(1.0)
        online[1].running_mean.fill_(3.0)
    update_target(target, online)
    for a, b in zip(target.state_dict().values(), online.state_dict().values()):
        assert torch.equal(a, b)
    with torch.no_grad():
        online[0].weight.add_(1.0)
    assert not torch.equal(target[0].weight, online[0].weight)


def test_soft_target_update_moves_by_tau():
    online, target = nn.Linear(2, 2), nn.Linear(2, 2)
    before = target.weight.detach().clone()
    update_target(target, online, tau=0.25)
    assert torch.allclose(target.weight, before + 0.25 * (online.weight - before))


def test_dqn_learning_rate_anneals_linearly_to_zero_by_the_last_update():
    from mptrain.rl.config import RLConfig
    from mptrain.rl.dqn import annealed_lr

    config = RLConfig(algo="dqn", steps=11_000, learning_starts=1_000, train_every=2,
                      lr=1e-3, anneal_lr=True)   # 5,000 updates
    assert annealed_lr(config, 0) == 1e-3
    assert annealed_lr(config, 2_500) == pytest.approx(5e-4)
    assert annealed_lr(config, 5_000) == 0.0
    assert annealed_lr(config, 6_000) == 0.0   # a resume to more steps asks past the end
    with pytest.raises(UserError, match="does nothing with .*a3c"):
        RLConfig.from_dict({"algo": "a3c", "anneal_lr": True})
