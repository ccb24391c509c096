import pytest
import torch
import torch.nn as nn

from mptrain.errors import UserError
from mptrain.rl.envs import EnvShape
from mptrain.rl.nets import ActorCritic, QNetwork, build_network

SHAPE = EnvShape("test", obs_dim=4, n_actions=3)


def test_built_in_networks_fit_their_algorithm():
    assert isinstance(build_network("a3c", SHAPE, 16), ActorCritic)
    q = build_network("dqn", SHAPE, 16)
    assert isinstance(q, QNetwork) and q(torch.zeros(5, 4)).shape == (5, 3)
    logits, value = build_network("a3c", SHAPE, 16)(torch.zeros(5, 4))
    assert logits.shape == (5, 3) and value.shape == (5,)


def make_q(obs_dim, n_actions):
    return nn.Linear(obs_dim, n_actions)


def test_a_user_network_with_the_wrong_outputs_is_refused():
    spec = f"{__file__}:make_q"
    assert isinstance(build_network("dqn", SHAPE, 16, spec), nn.Linear)
    with pytest.raises(UserError, match="must return .logits"):
        build_network("a3c", SHAPE, 16, spec)
