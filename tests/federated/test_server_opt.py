"""Server optimizers against Reddi et al. 2021's Algorithm 2, step by step by hand."""

import math

import pytest
import torch

from mptrain.errors import UserError
from mptrain.federated.server_opt import (ServerAdagrad, ServerAdam, ServerSGD, ServerYogi,
                                          build_server_optimizer)


def run(optimizer, x0, averages):
    x = torch.tensor(x0, dtype=torch.float32)
    state = optimizer.init_state(x.numel())
    for average in averages:
        optimizer.step_(x, torch.tensor(average), state)
    return x, state


def reference(kind, x, averages, lr, b1, b2, tau):
    """Algorithm 2 in plain Python on one coordinate: delta = avg - x, x += lr m/(sqrt v+tau)."""
    m, v = 0.0, tau ** 2
    for avg in averages:
        delta = avg - x
        m = b1 * m + (1 - b1) * delta
        if kind == "adagrad":
            v = v + delta ** 2
        elif kind == "adam":
            v = b2 * v + (1 - b2) * delta ** 2
        else:
            v = v - (1 - b2) * delta ** 2 * math.copysign(1.0, v - delta ** 2)
        x = x + lr * m / (math.sqrt(v) + tau)
    return x


@pytest.mark.parametrize("cls", [ServerAdam, ServerYogi, ServerAdagrad])
def test_adaptive_optimizers_follow_the_papers_update(cls):
    averages = [[0.5], [0.2], [0.9], [-0.3]]
    x, _ = run(cls(0.1, (0.9, 0.99), 1e-3), [1.0], averages)
    want = reference(cls.name, 1.0, [a[0] for a in averages], 0.1, 0.9, 0.99, 1e-3)
    assert x.item() == pytest.approx(want, rel=1e-5)


def test_adam_first_step_by_hand():
    # delta = -1: m = -0.1, v = 0.99 * 1e-6 + 0.01 = 0.01000099,
    # x = 1 + 0.1 * (-0.1) / (0.1000049 + 0.001)
    x, state = run(ServerAdam(0.1, (0.9, 0.99), 1e-3), [1.0], [[0.0]])
    assert state["m"].item() == pytest.approx(0.1)        # m of the pseudo-gradient g = x - avg
    assert state["v"].item() == pytest.approx(0.99e-6 + 0.01, rel=1e-6)
    assert x.item() == pytest.approx(1 - 0.01 / (math.sqrt(0.99e-6 + 0.01) + 1e-3), rel=1e-6)


def test_yogi_second_moment_grows_additively_where_adam_decays():
    # v = tau^2 < g^2 = 1: Yogi adds (1 - b2) g^2, Adam mixes b2 v + (1 - b2) g^2.
    _, yogi = run(ServerYogi(0.1, (0.9, 0.99), 1e-3), [1.0], [[0.0]])
    assert yogi["v"].item() == pytest.approx(1e-6 + 0.01, rel=1e-6)


def test_plain_sgd_is_bitwise_the_average():
    x, _ = run(ServerSGD(1.0, 0.0), [0.1, 0.2], [[0.3, 0.7]])
    assert torch.equal(x, torch.tensor([0.3, 0.7]))


def test_steps_on_slices_equal_one_step_on_the_whole():
    averages = torch.randn(3, 10, generator=torch.Generator().manual_seed(0))
    whole, _ = run(ServerYogi(0.05), [0.0] * 10, averages.tolist())
    optimizer = ServerYogi(0.05)
    x = torch.zeros(10)
    state = optimizer.init_state(10)
    for average in averages:
        for part in (slice(0, 4), slice(4, 10)):
            optimizer.step_(x[part], average[part], {k: v[part] for k, v in state.items()})
    assert torch.equal(x, whole)


def test_build_defaults_and_refusals():
    assert build_server_optimizer("sgd").lr == 1.0
    adam = build_server_optimizer("adam")
    assert (adam.lr, adam.beta1, adam.beta2, adam.tau) == (0.01, 0.9, 0.99, 1e-3)
    assert build_server_optimizer("yogi", lr=0.03, betas=(0.8, 0.9), tau=0.01).tau == 0.01
    with pytest.raises(UserError, match="unknown --server-optimizer"):
        build_server_optimizer("lamb")
