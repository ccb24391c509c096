"""Optimizers by name: the settings each gets, Adam's beta1 from ``momentum``, the fused
kernels where torch has them, and the per-parameter fallback where it has not."""

import copy

import pytest
import torch
import torch.nn as nn

from mptrain.engine.optim import build_optimizer

#: torch has fused SGD and Adam kernels on CPU since 2.4.
CPU_FUSED = torch.__version__ >= (2, 4)  # TorchVersion compares with tuples


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 2))


def gradients(model, steps=5):
    """A fixed sequence of gradients per step (not from a loss: the same for every copy)."""
    generator = torch.Generator().manual_seed(1)
    return [[torch.randn(p.shape, generator=generator) for p in model.parameters()]
            for _ in range(steps)]


def train(model, optimizer, grads):
    for step_grads in grads:
        for param, grad in zip(model.parameters(), step_grads):
            param.grad = grad.clone()
        optimizer.step()
    return [p.detach().clone() for p in model.parameters()]


def test_sgd_gets_the_settings():
    model = make_model()
    optimizer = build_optimizer(model.parameters(), "sgd", lr=0.3, momentum=0.8,
                                weight_decay=0.01)
    assert type(optimizer) is torch.optim.SGD
    [group] = optimizer.param_groups
    assert (group["lr"], group["momentum"], group["weight_decay"]) == (0.3, 0.8, 0.01)
    assert group["params"] == list(model.parameters())
    assert bool(group["fused"]) is CPU_FUSED


@pytest.mark.parametrize("momentum, beta1", [(0.0, 0.9), (0.8, 0.8), (0.5, 0.5)])
def test_adam_takes_beta1_from_momentum_and_keeps_its_own_default_otherwise(momentum, beta1):
    optimizer = build_optimizer(make_model().parameters(), "adam", lr=0.002, momentum=momentum,
                                weight_decay=0.1)
    assert type(optimizer) is torch.optim.Adam
    [group] = optimizer.param_groups
    assert group["betas"] == (beta1, 0.999)
    assert (group["lr"], group["weight_decay"]) == (0.002, 0.1)
    assert bool(group["fused"]) is CPU_FUSED


def test_an_unknown_optimizer_is_refused():
    with pytest.raises(ValueError, match="unknown optimizer 'lbfgs'"):
        build_optimizer(make_model().parameters(), "lbfgs", lr=0.1, momentum=0.0,
                        weight_decay=0.0)


@pytest.mark.parametrize("name, settings", [
    ("sgd", dict(lr=0.1, momentum=0.9, weight_decay=0.01)),
    ("adam", dict(lr=0.01, momentum=0.0, weight_decay=0.0)),
])
def test_the_fused_optimizer_steps_like_torchs_per_parameter_one(name, settings):
    model = make_model()
    grads = gradients(model)
    fused_model, plain_model = copy.deepcopy(model), copy.deepcopy(model)
    fused = build_optimizer(fused_model.parameters(), name, **settings)
    plain = reference_optimizer(name, plain_model.parameters(), **settings)
    for got, want in zip(train(fused_model, fused, grads), train(plain_model, plain, grads)):
        # One kernel for all parameters rounds in its own order: close, not bitwise.
        assert torch.allclose(got, want, rtol=0, atol=1e-6)
    assert not torch.equal(fused_model[0].weight, model[0].weight)  # it stepped


def reference_optimizer(name, params, lr, momentum, weight_decay):
    """torch's per-parameter (not fused) optimizer with build_optimizer's settings."""
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    return torch.optim.Adam(params, lr=lr, betas=(momentum or 0.9, 0.999),
                            weight_decay=weight_decay)


@pytest.mark.parametrize("error", [RuntimeError, ValueError, TypeError])
@pytest.mark.parametrize("name, torch_name, settings", [
    ("sgd", "SGD", dict(lr=0.1, momentum=0.9, weight_decay=0.01)),
    ("adam", "Adam", dict(lr=0.01, momentum=0.7, weight_decay=0.001)),
])
def test_without_a_fused_kernel_the_per_parameter_optimizer_is_returned(monkeypatch, error,
                                                                        name, torch_name,
                                                                        settings):
    """As torch answers where it has no fused kernel for the parameters (device, dtype, an
    older torch without the argument): the constructor raises for ``fused=True``."""
    original = getattr(torch.optim, torch_name)
    refused = []

    class NoFusedKernel(original):
        def __init__(self, params, *args, fused=None, **kwargs):
            if fused:
                refused.append(fused)
                raise error(f"{torch_name}: fused=True is not supported here")
            super().__init__(params, *args, fused=fused, **kwargs)

    model = make_model()
    grads = gradients(model)
    fallback_model, plain_model = copy.deepcopy(model), copy.deepcopy(model)
    monkeypatch.setattr(torch.optim, torch_name, NoFusedKernel)
    optimizer = build_optimizer(fallback_model.parameters(), name, **settings)
    monkeypatch.undo()

    assert refused == [True]  # fused was tried first ...
    assert isinstance(optimizer, original)  # ... and the per-parameter optimizer returned
    assert not optimizer.param_groups[0]["fused"]
    assert optimizer.param_groups[0]["params"] == list(fallback_model.parameters())
    plain = reference_optimizer(name, plain_model.parameters(), **settings)
    for got, want in zip(train(fallback_model, optimizer, grads),
                         train(plain_model, plain, grads)):
        assert torch.equal(got, want)  # the same kernels as torch's own default: bitwise
    assert not torch.equal(fallback_model[0].weight, model[0].weight)


def test_an_error_that_is_not_about_fusing_is_not_swallowed():
    """The fallback retries once without ``fused``; a bad setting still fails there."""
    with pytest.raises(ValueError, match="Invalid learning rate"):
        build_optimizer(make_model().parameters(), "adam", lr=-1.0, momentum=0.0,
                        weight_decay=0.0)
