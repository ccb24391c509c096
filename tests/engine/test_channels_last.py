"""Evaluation on a channels-last twin: the same answers as the model itself, the twin
follows the live model's values, and a network that needs NCHW falls back to itself."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from mptrain.engine.channels_last import ChannelsLastEvaluation
from mptrain.models.nets import MnistCNN

CPU = torch.device("cpu")


class NeedsNCHW(nn.Module):
    """A view after a convolution, as many published networks have it."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3)
        self.fc = nn.Linear(2 * 6 * 6, 3)

    def forward(self, x):
        return self.fc(F.relu(self.conv(x)).view(-1, 2 * 6 * 6))


def test_the_twin_answers_as_the_model_and_follows_its_values():
    torch.manual_seed(0)
    model, inputs = MnistCNN().eval(), torch.randn(64, 1, 28, 28)
    layout = ChannelsLastEvaluation(CPU)
    with torch.no_grad():
        forward = layout.forward_for(model)
        assert forward is not model                 # a twin runs it
        assert torch.allclose(forward(inputs), model(inputs), atol=1e-5)
        for param in model.parameters():             # training moves the live model on
            param.add_(0.01)
        forward = layout.forward_for(model)
        assert torch.allclose(forward(inputs), model(inputs), atol=1e-5)
        expected = model(inputs).argmax(1)
        assert torch.equal(forward(inputs).argmax(1), expected)


def test_a_network_that_needs_nchw_is_evaluated_as_it_is():
    torch.manual_seed(0)
    model, inputs = NeedsNCHW().eval(), torch.randn(8, 1, 8, 8)
    layout = ChannelsLastEvaluation(CPU)
    with torch.no_grad():
        assert torch.equal(layout.forward_for(model)(inputs), model(inputs))
        assert layout.forward_for(model) is model    # not tried again


def test_no_twin_without_convolutions_or_off_the_cpu():
    mlp = nn.Sequential(nn.Flatten(), nn.Linear(4, 2))
    assert ChannelsLastEvaluation(CPU).forward_for(mlp) is mlp
    cnn = MnistCNN()
    assert ChannelsLastEvaluation(torch.device("meta")).forward_for(cnn) is cnn


def test_an_error_after_the_twin_has_worked_is_the_models_own():
    torch.manual_seed(0)
    model = MnistCNN().eval()
    layout = ChannelsLastEvaluation(CPU)
    forward = layout.forward_for(model)
    with torch.no_grad():
        forward(torch.randn(2, 1, 28, 28))
        with pytest.raises(RuntimeError):
            forward(torch.randn(2, 1, 20, 20))       # wrong image size: 320 features no more


class NewBufferEachStep(nn.Module):
    """A conv net with BatchNorm that puts a new tensor in a buffer of its own as it
    trains (an exponential average, say): the twin must see the new one."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3)
        self.norm = nn.BatchNorm2d(2)
        self.register_buffer("scale", torch.ones(()))

    def forward(self, x):
        return (self.norm(self.conv(x)) * self.scale).flatten(1)


def test_the_twin_reads_the_models_values_by_name_every_time():
    torch.manual_seed(0)
    model, inputs = NewBufferEachStep(), torch.randn(4, 1, 8, 8)
    model.train()
    model(torch.randn(16, 1, 8, 8))          # BatchNorm's running statistics move
    model.eval()
    layout = ChannelsLastEvaluation(CPU)
    with torch.no_grad():
        layout.forward_for(model)(inputs)
        model.scale = torch.full((), 3.0)     # a new tensor, not an in-place change
        assert torch.allclose(layout.forward_for(model)(inputs), model(inputs), atol=1e-5)


def test_models_the_twin_cannot_serve_are_evaluated_as_they_are():
    volume = nn.Sequential(nn.Conv2d(1, 1, 1), nn.Conv3d(1, 1, 1))   # 5-D weights
    assert ChannelsLastEvaluation(CPU).forward_for(volume) is volume
    hooked = MnistCNN()
    hooked.conv1.register_forward_hook(lambda module, args, output: None)
    assert ChannelsLastEvaluation(CPU).forward_for(hooked) is hooked
