"""What the user's own code raises -- a model, data, environment, network or partition
factory, or the network's first forward pass -- is one line naming the flag and the
exception, never a traceback through mptrain; a multi-line message keeps its first line."""

from __future__ import annotations

import pytest
import torch.nn as nn

from mptrain.data.partitions import user_partition
from mptrain.data.sources import load_data
from mptrain.errors import UserError
from mptrain.models import build_model
from mptrain.rl.envs import EnvShape, make_env
from mptrain.rl.nets import build_network

MESSAGE = "the bucket is gone\n  Traceback (most recent call last):\n    somewhere"


def raises(*args):
    raise ValueError(MESSAGE)


def refuses(*args):
    raise UserError("--model: the caller's own one-line refusal")


class ForwardRaises(nn.Module):
    def forward(self, obs):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied\n(2x4 and 8x2)")


def forward_raises(obs_dim, n_actions):
    return ForwardRaises()


def _one_line(info) -> str:
    text = str(info.value)
    assert "\n" not in text and "Traceback" not in text
    return text


@pytest.mark.parametrize("call, flag", [
    (lambda spec: build_model(spec, (4,), 2, seed=0), "--model"),
    (lambda spec: load_data(spec), "--data"),
    (lambda spec: make_env(spec), "--env"),
    (lambda spec: build_network("dqn", EnvShape("test", 4, 2), 16, spec), "--net"),
])
def test_a_factory_that_raises_is_one_line_naming_the_flag(call, flag):
    spec = f"{__file__}:raises"
    with pytest.raises(UserError) as info:
        call(spec)
    assert _one_line(info) == (f"{flag} {spec!r}: the factory raised ValueError: "
                               "the bucket is gone")


def test_a_partition_function_that_raises_is_one_line():
    import torch

    spec = f"{__file__}:raises"
    with pytest.raises(UserError) as info:
        user_partition(spec, torch.zeros(10, dtype=torch.int64), 2, seed=0)
    assert _one_line(info).endswith("raised ValueError: the bucket is gone")


def test_a_user_error_from_a_factory_passes_on_as_it_is():
    with pytest.raises(UserError, match="^--model: the caller's own one-line refusal$"):
        build_model(f"{__file__}:refuses", (4,), 2, seed=0)


def test_a_user_network_whose_forward_raises_is_one_line():
    spec = f"{__file__}:forward_raises"
    with pytest.raises(UserError) as info:
        build_network("dqn", EnvShape("test", 4, 2), 16, spec)
    assert _one_line(info) == (f"--net {spec!r}: its forward pass on a batch of 2 observations "
                               "raised RuntimeError: mat1 and mat2 shapes cannot be multiplied")


def not_an_env():
    return "/home/user"


def test_an_env_factory_that_returns_something_else_is_refused_in_one_line():
    pytest.importorskip("gymnasium")
    spec = f"{__file__}:not_an_env"
    with pytest.raises(UserError) as info:
        make_env(spec)
    assert _one_line(info).startswith(f"--env {spec!r} returned str, which has no reset, step, close, action_space, observation_space; ")
