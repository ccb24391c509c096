"""A model with nothing to train is the user's mistake, refused in one line before a worker
starts: it was a RuntimeError traceback from every worker's first backward pass (under
fedavg, one ClientFailedError per client)."""

import pytest
import torch
import torch.nn as nn
from torch.utils.data import TensorDataset

import mptrain
from mptrain.errors import UserError


def data():
    inputs = torch.randn(64, 4)
    return TensorDataset(inputs, (inputs[:, 0] > 0).long())


def frozen():
    model = nn.Linear(4, 2)
    for param in model.parameters():
        param.requires_grad_(False)
    return model


class NoParameters(nn.Module):
    def forward(self, x):
        return x[:, :2]


@pytest.mark.parametrize("settings", [
    {"strategy": "single", "epochs": 1},
    {"strategy": "hogwild", "workers": 2, "epochs": 1},
    {"strategy": "fedavg", "workers": 1, "clients": 4, "clients_per_round": 2, "rounds": 1},
])
@pytest.mark.parametrize("model, words", [
    (frozen, "every parameter of the model (Linear, 2 tensors) has requires_grad=False"),
    (NoParameters, "the model (NoParameters) has no parameters"),
])
def test_a_model_with_nothing_to_train_is_refused_before_any_worker(settings, model, words):
    with pytest.raises(UserError) as info:
        mptrain.fit(model(), data(), data(), batch_size=8, quiet=True, **settings)
    assert words in str(info.value) and "\n" not in str(info.value)


def test_a_partly_frozen_model_trains():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    model[0].requires_grad_(False)
    before = model[0].weight.clone()
    result = mptrain.fit(model, data(), data(), batch_size=8, epochs=1, quiet=True)
    assert torch.equal(result.model[0].weight, before)


class _ForwardRaises(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(4, 2)

    def forward(self, x):
        raise RuntimeError("the forward pass exploded\n  a second line of torch's advice")


def test_a_forward_pass_that_raises_is_refused_in_one_line():
    from mptrain.api import bundle_from_datasets
    from mptrain.launch.preflight import check_model_fits_data

    bundle = bundle_from_datasets(TensorDataset(torch.zeros(6, 4), torch.tensor([0, 1] * 3)),
                                  None)
    with pytest.raises(UserError) as info:
        check_model_fits_data(_ForwardRaises(), bundle)
    assert str(info.value) == ("the model cannot take the data's inputs of shape (4,): "
                               "RuntimeError: the forward pass exploded")


def regression_data(values_per_target):
    inputs = torch.randn(32, 4)
    return TensorDataset(inputs, torch.randn(32, *values_per_target))


@pytest.mark.parametrize("outputs, values, fits", [
    (1, (), True), (1, (1,), True), (3, (3,), True),
    (2, (), False), (1, (3,), False), (6, (2, 3), True), (5, (2, 3), False),
])
def test_a_regression_model_must_return_one_value_per_target_value(outputs, values, fits):
    # It was a RuntimeError from view_as() in the first training step, in every worker.
    run = lambda: mptrain.fit(nn.Linear(4, outputs), regression_data(values), epochs=1,
                              batch_size=8, quiet=True)
    if fits:
        run()
        return
    with pytest.raises(UserError) as info:
        run()
    size = int(torch.Size(values).numel())
    assert f"each target has {size} value(s); it must return [batch, {size}]" \
        in str(info.value)


def conv_classes(size, count):
    generator = torch.Generator().manual_seed(size)
    return TensorDataset(torch.randn(count, 1, size, size, generator=generator),
                         torch.arange(count) % 3)


def pooling_net():
    """Takes images of any size: convolution, then a global pool."""
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(4, 3))


def test_a_test_set_of_other_sizes_that_the_model_takes_is_scored():
    # Inputs of another shape than training's are no mistake for a model that takes both
    # (a global pool): the shapes alone refused this run, which trains and scores.
    result = mptrain.fit(pooling_net(), conv_classes(8, 48), conv_classes(12, 12),
                         batch_size=8, epochs=1, quiet=True)
    assert result.epochs[-1].test_accuracy is not None


@pytest.mark.parametrize("model, words", [
    (lambda: nn.Sequential(nn.Flatten(), nn.Linear(64, 3)),
     "the model cannot take the test data's inputs of shape (1, 12, 12) (the training "
     "data's are (1, 8, 8)): RuntimeError: "),
    (lambda: nn.Sequential(nn.Conv2d(1, 1, 1), nn.AvgPool2d(4), nn.Flatten()),
     "the model's output for the test data has shape (2, 9) but (2, 4) for the training "
     "data; give both sets inputs that the model takes alike"),
])
def test_a_test_set_the_model_cannot_take_is_refused_before_training(model, words):
    with pytest.raises(UserError) as info:
        mptrain.fit(model(), conv_classes(8, 48), conv_classes(12, 12), batch_size=8,
                    epochs=1, quiet=True)
    assert str(info.value).startswith(words) and "\n" not in str(info.value), info.value
