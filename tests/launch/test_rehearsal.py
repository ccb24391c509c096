"""The parent's throwaway first step before it forks more workers than cores."""

import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import TensorDataset

import mptrain
from mptrain.config import TrainConfig
from mptrain.api import bundle_from_datasets
from mptrain.launch import layout as layout_module
from mptrain.launch import rehearsal
from run_watch import live_children  # noqa: E402

#: Layouts of the batches the rehearsal's forward passes saw (the parent's, not workers').
SEEN = []


class RecordingConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, kernel_size=3, padding=1)
        self.drop = nn.Dropout(0.3)   # draws from the RNG, which must come back untouched
        self.fc = nn.Linear(4 * 8 * 8, 3)

    def forward(self, x):
        hidden = self.conv(x)   # channels-last weights make a channels-last output
        SEEN.append("channels-last" if hidden.stride(1) == 1 else "nchw")
        return self.fc(self.drop(F.relu(hidden)).flatten(1))


class Broken(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        raise RuntimeError("this model never works")


def image_data(samples=48):
    generator = torch.Generator().manual_seed(3)
    inputs = torch.randn(samples, 1, 8, 8, generator=generator)
    targets = torch.randint(0, 3, (samples,), generator=generator)
    return TensorDataset(inputs, targets), TensorDataset(inputs[:16], targets[:16])


def config(**settings):
    return TrainConfig(**{"batch_size": 8, "lr": 0.1, "momentum": 0.5, **settings})


@pytest.mark.parametrize("workers, cores, method, device, expected", [
    (64, 2, "fork", "cpu", True),
    (2, 2, "fork", "cpu", False),       # side by side: a step in the parent only delays them
    (64, 2, "spawn", "cpu", False),     # spawn'd workers inherit nothing
    (64, 2, "forkserver", "cpu", False),
    (64, 2, "fork", "cuda", False),
])
def test_worth_rehearsing_only_for_more_forked_cpu_workers_than_cores(workers, cores, method,
                                                                       device, expected):
    assert rehearsal.worth_rehearsing(workers, cores, method, device) is expected


def test_a_conv_net_is_rehearsed_in_both_layouts_and_left_as_it_was():
    SEEN.clear()
    model = RecordingConvNet()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng_before = torch.get_rng_state()
    threads_before = torch.get_num_threads()
    bundle = bundle_from_datasets(*image_data())

    assert rehearsal.rehearse_first_step(model, bundle, config(), threads=1)

    assert SEEN == ["nchw", "channels-last"]   # hogwild's shared model, a private replica
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key
        assert value.is_contiguous(), key
    assert torch.equal(torch.get_rng_state(), rng_before)
    assert torch.get_num_threads() == threads_before


def test_a_net_without_convolutions_is_rehearsed_once():
    SEEN.clear()
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 3))
    model.register_forward_pre_hook(lambda module, args: SEEN.append("step"))
    assert rehearsal.rehearse_first_step(model, bundle_from_datasets(*image_data()), config(),
                                         threads=1)
    assert SEEN == ["step"]


def test_a_model_that_fails_is_left_to_the_workers_to_report():
    bundle = bundle_from_datasets(*[TensorDataset(torch.randn(16, 4), torch.randint(0, 3, (16,)))
                                    for _ in range(2)])
    threads_before = torch.get_num_threads()
    assert rehearsal.rehearse_first_step(Broken(), bundle, config(), threads=1) is False
    assert torch.get_num_threads() == threads_before


def test_a_large_model_is_not_copied(monkeypatch):
    SEEN.clear()
    monkeypatch.setattr(rehearsal, "MAX_MODEL_BYTES", 100)
    assert rehearsal.rehearse_first_step(RecordingConvNet(),
                                         bundle_from_datasets(*image_data()), config(),
                                         threads=1) is False
    assert SEEN == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_the_free_heap_is_released_on_linux():
    assert rehearsal.release_free_heap() is True


def _fit(model, **settings):
    train, test = image_data()
    return mptrain.fit(model, train, test, strategy="sync", workers=2, epochs=2, batch_size=8,
                       lr=0.1, seed=4, threads_per_worker=1, start_method="fork", **settings)


@pytest.mark.timeout(120)
def test_a_rehearsed_run_trains_exactly_as_an_unrehearsed_one(monkeypatch):
    """With more workers than cores the parent rehearses before it forks; what the workers
    train must not change by one bit (same model, same random numbers)."""
    calls = []
    real = rehearsal.rehearse_first_step

    def counted(*args, **kwargs):
        calls.append(real(*args, **kwargs))
        return calls[-1]

    initial = RecordingConvNet()
    monkeypatch.setattr(layout_module, "usable_cores", lambda: 1)   # 2 workers > 1 core
    monkeypatch.setattr(rehearsal, "rehearse_first_step", counted)
    rehearsed = _fit(_copy(initial))
    assert calls == [True]

    monkeypatch.setattr(rehearsal, "rehearse_first_step", lambda *args, **kwargs: False)
    plain = _fit(_copy(initial))

    a, b = rehearsed.model.state_dict(), plain.model.state_dict()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    assert [e.train_loss for e in rehearsed.epochs] == [e.train_loss for e in plain.epochs]
    assert live_children() == []


def _copy(model):
    clone = RecordingConvNet()
    clone.load_state_dict(model.state_dict())
    return clone
