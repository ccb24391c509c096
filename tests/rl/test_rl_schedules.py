import copy

import pytest
import torch
import torch.nn as nn

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
