"""``dp`` (nn.DataParallel): GPUs only, refused on CPU with what to use; a step takes a
batch per GPU from one pass over the epoch's permutation. The training run itself needs a
GPU (``benchmarks/gpu.py`` runs it too)."""

from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn
from torch.utils.data import TensorDataset

import mptrain
from mptrain.config import TrainConfig
from mptrain.data.sharding import shard_indices
from mptrain.errors import UserError
from mptrain.strategies import data_parallel_gpus as dp
from mptrain.strategies.registry import make_strategy


@pytest.fixture
def gpus(monkeypatch):
    def visible(count):
        monkeypatch.setattr(dp, "visible_gpus", lambda: count)
    return visible


def config(**settings):
    return TrainConfig.from_settings({"strategy": "dp", **settings})


def test_dp_trains_on_gpus_by_default_all_of_them(gpus):
    gpus(3)
    made = config()
    assert (made.device, made.workers) == ("cuda", 3)


@pytest.mark.parametrize("visible, settings, needle", [
    (2, {"device": "cpu"}, "needs --device cuda; on CPU use --strategy ddp or sync"),
    (0, {}, "needs GPUs and no CUDA device is visible; on CPU use --strategy ddp or sync"),
    (2, {"workers": 3}, "over --workers 3 GPUs, but 2 are visible; use --workers 2 or fewer"),
], ids=["cpu", "no-gpu", "too-many"])
def test_what_dp_cannot_do_is_refused_in_one_line(gpus, visible, settings, needle):
    gpus(visible)
    with pytest.raises(UserError) as info:
        config(**settings)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_a_step_takes_a_batch_per_gpu_and_the_epoch_covers_every_sample_once(gpus):
    gpus(2)
    strategy = make_strategy(config(workers=2, batch_size=8, seed=3))
    group = SimpleNamespace(world_size=1, rank=0)
    taken = strategy.epoch_batches(50, group, epoch=1)
    cut = [indices for _, indices in taken.batches]
    assert [len(c) for c in cut] == [16, 16, 16, 2] and taken.steps == 4
    assert torch.equal(torch.cat(cut), shard_indices(50, 1, 0, 3, 1))
    data = SimpleNamespace(train=range(50))
    assert strategy.samples_per_round(data, 1) == 50
    assert strategy.batch_sizes(data, 1) == [2, 16]


def test_steps_per_epoch_counts_steps_of_a_batch_per_gpu(gpus):
    gpus(2)
    strategy = make_strategy(config(workers=2, batch_size=8, steps_per_epoch=2))
    taken = strategy.epoch_batches(50, SimpleNamespace(world_size=1, rank=0), epoch=0)
    assert [len(indices) for _, indices in taken.batches] == [16, 16]
    assert strategy.samples_per_round(SimpleNamespace(train=range(50)), 1) == 32


@pytest.mark.timeout(120)
@pytest.mark.skipif(torch.cuda.device_count() == 0, reason="needs a CUDA device")
def test_dp_trains_the_callers_model_on_the_gpus():
    torch.manual_seed(0)
    inputs = torch.randn(256, 4)
    data = TensorDataset(inputs, (inputs[:, 0] > 0).long())
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
    before = model[0].weight.detach().clone()
    result = mptrain.fit(model, data, data, strategy="dp", epochs=3, batch_size=16, lr=0.1,
                         quiet=True)
    assert result.summary["gpus"] == torch.cuda.device_count()
    assert result.test_accuracy > 0.8
    assert not torch.equal(result.model[0].weight.detach().cpu(), before)


class RecordsAutocastDtype(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(4, 2)
        self.dtypes = []

    def forward(self, x):
        self.dtypes.append(torch.get_autocast_dtype("cuda")
                           if torch.is_autocast_enabled("cuda") else None)
        return self.layer(x)


@pytest.mark.timeout(120)
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_dp_replicas_on_several_gpus_compute_in_bf16_not_float16():
    inputs = torch.randn(128, 4)
    data = TensorDataset(inputs, (inputs[:, 0] > 0).long())
    model = RecordsAutocastDtype()
    mptrain.fit(model, data, None, strategy="dp", workers=2, epochs=1, batch_size=16,
                precision="bf16", quiet=True)
    assert model.dtypes and set(model.dtypes) == {torch.bfloat16}
