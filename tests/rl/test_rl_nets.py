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


class ColumnValueHead(nn.Module):
    """The usual actor-critic of CleanRL and most tutorials: the value head is (N, 1)."""

    def __init__(self, obs_dim, n_actions, value_width=1):
        super().__init__()
        self.body = nn.Linear(obs_dim, 8)
        self.pi, self.v = nn.Linear(8, n_actions), nn.Linear(8, value_width)

    def forward(self, obs):
        h = torch.tanh(self.body(obs))
        return self.pi(h), self.v(h)


def make_column_value(obs_dim, n_actions):
    return ColumnValueHead(obs_dim, n_actions)


def make_two_values(obs_dim, n_actions):
    return ColumnValueHead(obs_dim, n_actions, value_width=2)


class TransposedValue(ColumnValueHead):
    def forward(self, obs):
        logits, value = super().forward(obs)
        return logits, value.T   # (1, N): as many numbers, not a value per observation


def make_transposed_value(obs_dim, n_actions):
    return TransposedValue(obs_dim, n_actions)


def test_a_value_head_of_shape_n_by_1_is_accepted():
    model = build_network("a3c", SHAPE, 16, f"{__file__}:make_column_value")
    assert type(model).__name__ == "ColumnValueHead"


@pytest.mark.parametrize("maker, shape", [("make_two_values", r"\(2, 2\)"),
                                          ("make_transposed_value", r"\(1, 2\)")])
def test_any_other_value_shape_is_refused_naming_the_shape(maker, shape):
    with pytest.raises(UserError, match=rf"value \[batch\] or \[batch, 1\].*got .*{shape}"):
        build_network("a3c", SHAPE, 16, f"{__file__}:{maker}")


class SqueezedValueHead(ColumnValueHead):
    def forward(self, obs):
        logits, value = super().forward(obs)
        return logits, value.squeeze(-1)


def make_squeezed_value(obs_dim, n_actions):
    return SqueezedValueHead(obs_dim, n_actions)
