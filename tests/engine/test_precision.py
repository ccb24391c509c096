"""``--precision bf16``: forward passes under bfloat16 autocast in every strategy's training
and in evaluation, while parameters, gradients and what workers exchange stay float32."""

import threading

import pytest
import torch
import torch.nn as nn
from torch.utils.data import TensorDataset

import mptrain
from mptrain.config import TrainConfig
from mptrain.data.device_feed import DeviceFeed
from mptrain.data.shared import SharedTensorDataset
from mptrain.engine.autocast import (AutocastModule, autocast_module, in_precision,
                                    without_autocast_module)
from mptrain.engine.precision import precision_warnings
from mptrain.engine.task import evaluate
from mptrain.errors import UserError

CPU = torch.device("cpu")


class AutocastOnly(nn.Module):
    """Trains only under CPU autocast: a run that finishes trained every step in bf16 (the
    parent's shape check runs it in eval mode, outside autocast)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.layer = nn.Linear(4, 3)
        self.seen = []

    def forward(self, x):
        if self.training and not torch.is_autocast_enabled("cpu"):
            raise RuntimeError("a training step outside autocast")
        out = self.layer(x)
        self.seen.append(out.dtype)
        return out


def tiny_data():
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(96, 4, generator=generator)
    return TensorDataset(inputs, (inputs[:, 0] > 0).long() + (inputs[:, 1] > 0).long())


def test_32_is_the_forward_itself():
    model = nn.Linear(4, 3)
    assert in_precision(model, "32", CPU) is model


def test_bf16_computes_in_bfloat16_and_hands_back_float32():
    model = AutocastOnly()
    output = in_precision(model, "bf16", CPU)(torch.randn(5, 4))
    assert model.seen == [torch.bfloat16] and output.dtype == torch.float32
    output.sum().backward()
    assert model.layer.weight.dtype == model.layer.weight.grad.dtype == torch.float32


def test_evaluation_scores_the_model_in_the_runs_precision():
    model, data = AutocastOnly(), DeviceFeed(SharedTensorDataset(*tiny_data().tensors))
    evaluate(model, data, torch.arange(10), "classification", 4, CPU, precision="bf16")
    assert set(model.seen) == {torch.bfloat16}
    model.seen.clear()
    evaluate(model, data, torch.arange(10), "classification", 4, CPU)
    assert set(model.seen) == {torch.float32}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("strategy", ["single", "hogwild", "sync", "ddp", "fedavg"])
def test_every_strategy_trains_in_bf16_with_float32_parameters(strategy):
    data = tiny_data()
    model = AutocastOnly()
    before = model.layer.weight.detach().clone()
    options = dict(rounds=2, clients=4, clients_per_round=2) if strategy == "fedavg" \
        else dict(epochs=2)
    result = mptrain.fit(model, data, data, strategy=strategy,
                         workers=1 if strategy == "single" else 2, batch_size=16, lr=0.1,
                         precision="bf16", threads_per_worker=1, quiet=True, **options)
    assert result.summary["precision"] == "bf16"
    trained = result.model.layer.weight
    assert trained.dtype == torch.float32 and not torch.equal(trained, before)


def test_precision_is_a_choice_said_in_one_line():
    assert TrainConfig(precision="bf16").precision == "bf16"
    with pytest.raises(UserError) as info:
        TrainConfig(precision="fp16")
    assert "--precision" in str(info.value) and "bf16" in str(info.value)
    assert "\n" not in str(info.value)


AVX2_ONLY = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n"
WITH_AMX = "processor\t: 0\nflags\t\t: fpu avx2 avx512f amx_bf16 amx_tile\n"


def test_an_emulated_bf16_cpu_gets_a_warning_and_nothing_else_does():
    assert precision_warnings("bf16", "cpu", AVX2_ONLY) == [
        "--precision bf16 on a CPU without AVX512-BF16 or AMX: torch emulates bfloat16 and "
        "a step is several times slower than with --precision 32"]
    assert precision_warnings("bf16", "cpu", WITH_AMX) == []
    assert precision_warnings("bf16", "cpu", "no flags here") == []   # cannot tell: quiet
    assert precision_warnings("bf16", "cuda", AVX2_ONLY) == []
    assert precision_warnings("32", "cpu", AVX2_ONLY) == []


def test_a_module_that_enters_autocast_itself_computes_bf16_in_a_fresh_thread():
    # nn.DataParallel runs replicas in threads of their own: the dtype a caller set for
    # autocast does not reach them, so dp wraps the model in this.
    model = AutocastOnly()
    wrapped = autocast_module(model, "bf16", "cpu")
    assert isinstance(wrapped, AutocastModule) and without_autocast_module(wrapped) is model
    assert autocast_module(model, "32", "cpu") is model is without_autocast_module(model)
    outputs = []
    thread = threading.Thread(target=lambda: outputs.append(wrapped(torch.randn(2, 4))))
    thread.start()
    thread.join(timeout=30)
    assert model.seen == [torch.bfloat16] and outputs[0].dtype == torch.bfloat16
