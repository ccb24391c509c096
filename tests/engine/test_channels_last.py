"""Evaluation on a channels-last twin: the same answers as the model itself, the twin
follows the live model's values, and a network that needs NCHW falls back to itself."""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from mptrain.engine.channels_last import (ChannelsLastEvaluation, ChannelsLastTraining,
                                          forward_in_its_layout, hand_back_layout,
                                          lay_out_shared_model)
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


def _one_sgd_step(model, forward, inputs, targets):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = F.cross_entropy(forward(inputs), targets)
    loss.backward()
    optimizer.step()
    return loss.item()


def test_a_private_model_trains_in_channels_last_to_the_same_values():
    torch.manual_seed(0)
    reference = MnistCNN()
    model = MnistCNN()
    model.load_state_dict(reference.state_dict())
    layout = ChannelsLastTraining(model, CPU)
    assert layout.active and model.conv1.weight.is_contiguous(memory_format=torch.channels_last)
    params = list(model.parameters())
    inputs, targets = torch.randn(32, 1, 28, 28), torch.randint(0, 10, (32,))
    torch.manual_seed(1)   # the same dropout masks on both sides
    loss = _one_sgd_step(model, layout.forward, inputs, targets)
    torch.manual_seed(1)
    expected = _one_sgd_step(reference, reference, inputs, targets)
    assert loss == pytest.approx(expected, rel=1e-5)
    assert [p is q for p, q in zip(params, model.parameters())] == [True] * len(params)
    for mine, theirs in zip(model.state_dict().values(), reference.state_dict().values()):
        assert torch.allclose(mine, theirs, atol=1e-5)
        # Values leave in the logical order, as the aggregation reads them.
        assert torch.allclose(mine.reshape(-1), theirs.reshape(-1), atol=1e-5)


def _conv2_weight_is_channels_last(model):
    weight = model.conv2.weight   # 10 input channels: the two layouts differ
    return weight.is_contiguous(memory_format=torch.channels_last) and not weight.is_contiguous()


def test_the_callers_model_is_handed_back_in_the_layout_it_came_in():
    model = MnistCNN()
    params = list(model.parameters())
    layout = ChannelsLastTraining(model, CPU)
    assert _conv2_weight_is_channels_last(model)
    layout.hand_back()
    assert all(p.is_contiguous() for p in model.parameters())
    layout.resume()                                  # the next round trains fast again
    assert _conv2_weight_is_channels_last(model)
    assert [p is q for p, q in zip(params, model.parameters())] == [True] * len(params)
    # A model that came in channels-last stays so.
    mine = MnistCNN().to(memory_format=torch.channels_last)
    ChannelsLastTraining(mine, CPU).hand_back()
    assert _conv2_weight_is_channels_last(mine)


def test_a_private_network_that_needs_nchw_goes_back_to_it_before_training():
    torch.manual_seed(0)
    model = NeedsNCHW()
    layout = ChannelsLastTraining(model, CPU)
    inputs = torch.randn(4, 1, 8, 8)
    output = layout.forward(inputs)          # the first batch fails, then runs in NCHW
    assert not layout.active and output.shape == (4, 3)
    assert model.conv.weight.is_contiguous()


class NeedsNCHWAfterStatsAndDropout(nn.Module):
    """Fails in channels-last only after BatchNorm has updated its statistics and dropout
    has drawn its mask."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3)
        self.norm = nn.BatchNorm2d(2)
        self.drop = nn.Dropout(0.5)
        self.fc = nn.Linear(2 * 6 * 6, 3)

    def forward(self, x):
        return self.fc(self.drop(F.relu(self.norm(self.conv(x)))).view(-1, 2 * 6 * 6))


def test_a_failed_channels_last_batch_leaves_no_trace_in_buffers_or_randomness():
    torch.manual_seed(0)
    model = NeedsNCHWAfterStatsAndDropout()
    reference = copy.deepcopy(model)
    inputs = torch.randn(4, 1, 8, 8)

    torch.manual_seed(1)
    expected = reference(inputs)
    expected_next_draw = torch.rand(3)
    torch.manual_seed(1)
    output = ChannelsLastTraining(model, CPU).forward(inputs)

    assert torch.equal(output, expected)                      # the same dropout mask
    assert torch.equal(torch.rand(3), expected_next_draw)      # nothing else drawn
    for name, buffer in reference.named_buffers():             # statistics updated once
        assert torch.equal(dict(model.named_buffers())[name], buffer), name
    assert int(model.norm.num_batches_tracked) == 1


class FailsOnDemand(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.fail = nn.Conv2d(1, 2, 3), False

    def forward(self, x):
        if self.fail:
            raise RuntimeError("the model's own error")
        return self.conv(x).flatten(1)


def test_an_error_after_channels_last_training_has_worked_is_the_models_own():
    model = FailsOnDemand()
    layout = ChannelsLastTraining(model, CPU)
    layout.forward(torch.randn(2, 1, 5, 5))
    model.fail = True
    with pytest.raises(RuntimeError, match="the model's own error"):
        layout.forward(torch.randn(2, 1, 5, 5))
    assert layout.active


def test_no_channels_last_training_without_convolutions_hooks_or_a_cpu():
    mlp = nn.Sequential(nn.Flatten(), nn.Linear(4, 2))
    assert not ChannelsLastTraining(mlp, CPU).active
    hooked = MnistCNN()
    hooked.conv1.register_forward_hook(lambda module, args, output: None)
    assert not ChannelsLastTraining(hooked, CPU).active
    assert hooked.conv1.weight.is_contiguous()
    assert not ChannelsLastTraining(MnistCNN(), torch.device("meta")).active


def test_a_model_that_trains_in_channels_last_is_evaluated_without_a_twin():
    torch.manual_seed(0)
    reference = MnistCNN().eval()
    model = MnistCNN().eval()
    model.load_state_dict(reference.state_dict())
    ChannelsLastTraining(model, CPU)
    layout = ChannelsLastEvaluation(CPU)
    inputs = torch.randn(16, 1, 28, 28)
    with torch.no_grad():
        forward = layout.forward_for(model)
        assert torch.allclose(forward(inputs), reference(inputs), atol=1e-5)
        assert layout._twin is None                     # nothing copied
        layout.forward_for(reference)                   # an NCHW model still gets one
        assert layout._twin is not None


def test_no_channels_last_training_where_conversion_makes_new_parameters():
    torch.__future__.set_overwrite_module_params_on_conversion(True)
    try:
        model = MnistCNN()
        params = list(model.parameters())
        layout = ChannelsLastTraining(model, CPU)
        layout.resume()
        layout.hand_back()
    finally:
        torch.__future__.set_overwrite_module_params_on_conversion(False)
    assert not layout.active
    assert [p is q for p, q in zip(params, model.parameters())] == [True] * len(params)


# -- a shared model (hogwild) laid out once, before the workers start -------------------------

def _write_in_child(model):
    import multiprocessing
    def child():
        with torch.no_grad():
            model.conv2.weight.add_(1.0)   # in place, as a Hogwild step writes
    process = multiprocessing.get_context("fork").Process(target=child)
    process.start()
    process.join(30)
    assert process.exitcode == 0


def test_a_shared_conv_net_is_laid_out_channels_last_and_stays_shared():
    torch.manual_seed(0)
    model = MnistCNN()
    model.share_memory()
    params = list(model.parameters())
    before = [p.detach().clone() for p in params]
    output = model(torch.randn(2, 1, 28, 28))
    assert lay_out_shared_model(model, torch.randn(2, 1, 28, 28)) is True
    assert _conv2_weight_is_channels_last(model) and model.training
    assert all(p.is_shared() for p in model.parameters())
    assert [p is q for p, q in zip(params, model.parameters())] == [True] * len(params)
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))
    forward = forward_in_its_layout(model)
    torch.manual_seed(1)
    inputs = torch.randn(2, 1, 28, 28)
    assert torch.allclose(model.eval()(inputs), forward(inputs), atol=1e-5)
    _write_in_child(model)                  # a worker's in-place write reaches the parent
    assert torch.equal(model.conv2.weight, before[2] + 1.0)
    hand_back_layout(model)
    assert all(p.is_contiguous() for p in model.parameters())
    assert output.shape == (2, 10)


def test_a_shared_net_that_needs_nchw_is_left_as_it_is():
    model = NeedsNCHW()
    model.share_memory()
    assert lay_out_shared_model(model, torch.randn(2, 1, 8, 8)) is False
    assert all(p.is_contiguous() and p.is_shared() for p in model.parameters())
    assert forward_in_its_layout(model) is model
    # The probe ran in eval mode under a forked RNG: no buffer moved, no number drawn.
    batch_norm = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2))
    batch_norm.share_memory()
    sample = torch.randn(2, 1, 8, 8)
    state = torch.get_rng_state()
    assert lay_out_shared_model(batch_norm, sample) is True
    assert torch.equal(batch_norm[1].running_mean, torch.zeros(2))
    assert torch.equal(torch.get_rng_state(), state)


def test_on_a_gpu_the_model_keeps_its_layout():
    """Channels-last only where it was measured faster: on CPU. On an H200 the plain loop
    lost 19% to it (issue 40), so a GPU model trains and evaluates in NCHW."""
    model = MnistCNN()
    training = ChannelsLastTraining(model, torch.device("cuda"))
    assert not training.active
    assert all(p.is_contiguous() for p in model.parameters())
    evaluation = ChannelsLastEvaluation(torch.device("cuda"))
    assert evaluation.forward_for(model) is model
