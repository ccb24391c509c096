"""The parent's throwaway first step before it forks more workers than cores."""

import platform
import random
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.optimizer import register_optimizer_step_pre_hook
from torch.utils.data import TensorDataset

import mptrain
from mptrain.config import TrainConfig
from mptrain.api import bundle_from_datasets
from mptrain.errors import Interrupted
from mptrain.launch import attempt, rehearsal
from mptrain.comm.kind import CommKind
from mptrain.launch import plan as plan_module
from mptrain.launch import tuning
from mptrain.strategies import make_strategy
from run_watch import live_children  # noqa: E402
from forking import fork_or_skip

#: Layouts of the batches the rehearsal's forward passes saw (the parent's, not workers'),
#: and the batches' sizes.
SEEN, SIZES = [], []


class RecordingConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        # Two input channels: with one, a channels-last weight would also be contiguous.
        self.conv = nn.Conv2d(2, 4, kernel_size=3, padding=1)
        self.drop = nn.Dropout(0.3)   # draws from the RNG, which must come back untouched
        self.fc = nn.Linear(4 * 8 * 8, 3)

    def forward(self, x):
        hidden = self.conv(x)   # channels-last weights make a channels-last output
        SEEN.append("channels-last" if hidden.stride(1) == 1 else "nchw")
        SIZES.append(len(x))
        return self.fc(self.drop(F.relu(hidden)).flatten(1))


class Broken(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        raise RuntimeError("this model never works")


def image_data(samples=48):
    generator = torch.Generator().manual_seed(3)
    inputs = torch.randn(samples, 2, 8, 8, generator=generator)
    targets = torch.randint(0, 3, (samples,), generator=generator)
    return TensorDataset(inputs, targets), TensorDataset(inputs[:16], targets[:16])


def config(**settings):
    return TrainConfig(**{"batch_size": 8, "lr": 0.1, "momentum": 0.5, **settings})


@pytest.mark.parametrize("workers, cores, device, expected", [
    (64, 2, "cpu", True),
    (3, 2, "cpu", True),
    (2, 2, "cpu", False),     # side by side: a step in the parent only delays them
    (64, 2, "cuda", False),   # nothing of a GPU's is inherited (and CUDA workers spawn)
])
def test_worth_rehearsing_only_for_more_cpu_workers_than_cores(workers, cores, device,
                                                               expected, monkeypatch):
    monkeypatch.setattr(rehearsal, "backward_ends_forking", lambda: False)
    assert rehearsal.worth_rehearsing(workers, cores, device) is expected


def test_never_where_a_gpu_is_visible(monkeypatch):
    # The rehearsal's backward pass would start autograd's device threads: no worker forked
    # after it could train (tests/launch/test_autograd_fork.py).
    monkeypatch.setattr(rehearsal, "backward_ends_forking", lambda: True)
    assert not rehearsal.worth_rehearsing(64, 2, "cpu")


@pytest.mark.parametrize("private, layout", [(True, "channels-last"), (False, "nchw")])
def test_a_conv_net_is_rehearsed_in_the_workers_layout_and_left_as_it_was(private, layout):
    SEEN.clear()
    model = RecordingConvNet()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng_before = torch.get_rng_state()
    threads_before = torch.get_num_threads()
    bundle = bundle_from_datasets(*image_data())

    assert rehearsal.rehearse_first_steps(model, bundle, config(), threads=1,
                                         channels_last=private)

    assert SEEN == [layout]   # a private replica (sync), or the shared model (hogwild)
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key
        assert value.is_contiguous(), key
    assert torch.equal(torch.get_rng_state(), rng_before)
    assert torch.get_num_threads() == threads_before


def test_one_step_for_each_batch_size_a_worker_meets():
    SEEN.clear(), SIZES.clear()
    assert rehearsal.rehearse_first_steps(RecordingConvNet(), bundle_from_datasets(*image_data()),
                                          config(), threads=1, channels_last=True,
                                          batch_sizes=[8, 4])
    assert SIZES == [8, 4] and SEEN == ["channels-last"] * 2


@pytest.mark.parametrize("samples, workers, batch, steps, sizes", [
    (60_000, 64, 64, None, [42, 64]),   # 938 per shard: 14 full batches and one of 42
    (60_000, 2, 64, None, [48, 64]),
    (48, 4, 8, None, [4, 8]),
    (48, 3, 8, None, [8]),              # 16 per shard: full batches only
    (48, 8, 8, None, [6]),              # a shard smaller than one batch
    (50, 4, 8, None, [5, 8]),           # 13 per shard, padded as DistributedSampler pads
    (60_000, 64, 64, 10, [64]),         # --steps-per-epoch cuts the shard to full batches
    (60_000, 64, 64, 20, [42, 64]),     # ... or not, when the shard is shorter
])
def test_a_data_parallel_worker_meets_a_full_batch_and_its_shards_last(samples, workers,
                                                                        batch, steps, sizes):
    strategy = make_strategy(TrainConfig(strategy="sync", workers=workers, batch_size=batch,
                                         steps_per_epoch=steps))
    data = SimpleNamespace(train=range(samples))
    assert strategy.batch_sizes(data, workers) == sizes


class DrawsEverywhere(nn.Module):
    """A forward that draws from Python's and numpy's generators too."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(128, 3)

    def forward(self, x):
        SEEN.append("step")
        noise = random.random() + float(np.random.rand())
        return self.fc(x.flatten(1)) * (1 + 0 * noise)


def test_python_and_numpy_generators_are_left_as_they_were():
    SEEN.clear()
    python_before, numpy_before = random.getstate(), np.random.get_state()
    assert rehearsal.rehearse_first_steps(DrawsEverywhere(),
                                         bundle_from_datasets(*image_data()), config(),
                                         threads=1, channels_last=True)
    assert SEEN == ["step"]   # no convolution: trained once, as it is
    assert random.getstate() == python_before
    numpy_after = np.random.get_state()
    assert numpy_after[0] == numpy_before[0] and (numpy_after[1] == numpy_before[1]).all() \
        and numpy_after[2:] == numpy_before[2:]


def test_a_model_with_hooks_is_not_rehearsed():
    """Hooks are user code that may count or record; workers would inherit what they did."""
    calls = []
    model = RecordingConvNet()
    handle = model.conv.register_forward_hook(lambda module, args, output: calls.append(1))
    bundle = bundle_from_datasets(*image_data())
    assert rehearsal.rehearse_first_steps(model, bundle, config(), threads=1,
                                         channels_last=True) is False
    handle.remove()
    handle = nn.modules.module.register_module_forward_pre_hook(
        lambda module, args: calls.append(1))
    try:
        assert rehearsal.rehearse_first_steps(model, bundle, config(), threads=1,
                                             channels_last=True) is False
    finally:
        handle.remove()
    handle = register_optimizer_step_pre_hook(
        lambda optimizer, args, kwargs: calls.append(1))
    try:
        assert rehearsal.rehearse_first_steps(model, bundle, config(), threads=1,
                                             channels_last=True) is False
    finally:
        handle.remove()
    assert calls == []
    assert rehearsal.rehearse_first_steps(model, bundle, config(), threads=1,
                                         channels_last=True) is True


def test_a_model_that_fails_is_left_to_the_workers_to_report():
    bundle = bundle_from_datasets(*[TensorDataset(torch.randn(16, 4), torch.randint(0, 3, (16,)))
                                    for _ in range(2)])
    threads_before = torch.get_num_threads()
    assert rehearsal.rehearse_first_steps(Broken(), bundle, config(), threads=1,
                                         channels_last=True) is False
    assert torch.get_num_threads() == threads_before


class StoppedMidStep(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        raise Interrupted(15)   # what mptrain's SIGTERM handler raises


def test_a_stop_signal_during_the_rehearsal_stops_the_run():
    bundle = bundle_from_datasets(*[TensorDataset(torch.randn(16, 4), torch.randint(0, 3, (16,)))
                                    for _ in range(2)])
    threads_before = torch.get_num_threads()
    with pytest.raises(Interrupted):
        rehearsal.rehearse_first_steps(StoppedMidStep(), bundle, config(), threads=1,
                                       channels_last=True)
    assert torch.get_num_threads() == threads_before


def test_a_large_model_is_not_copied(monkeypatch):
    SEEN.clear()
    monkeypatch.setattr(rehearsal, "MAX_MODEL_BYTES", 100)
    assert rehearsal.rehearse_first_steps(RecordingConvNet(),
                                         bundle_from_datasets(*image_data()), config(),
                                         threads=1, channels_last=True) is False
    assert SEEN == []


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
                    reason="glibc's malloc_trim")
def test_the_free_heap_is_released_with_glibc():
    assert tuning.release_free_heap() is True


def _job(strategy="sync", workers=4, device="cpu", comm="shm", processes=None):
    if strategy == "a3c":   # RL actors: nothing of theirs to rehearse
        from mptrain.rl.a3c import A3CStrategy
        from mptrain.rl.config import RLConfig

        job_config = RLConfig(workers=workers)
        made = A3CStrategy(job_config)
    else:
        settings = {"strategy": strategy, "device": device, "workers": workers}
        if strategy == "ddp" and comm != "shm":
            settings["ddp_backend"] = comm
        job_config = TrainConfig(**settings)
        made = make_strategy(job_config)
    return SimpleNamespace(plan=SimpleNamespace(workers=workers, cores=2, threads=1,
                                                comm=CommKind(comm), processes=processes),
                           config=job_config, model=RecordingConvNet(),
                           bundle=bundle_from_datasets(*image_data()), strategy=made)


@pytest.mark.parametrize("job, rehearsed", [
    (_job(), [True]),                              # sync: private replicas, channels-last
    (_job("ddp"), [True]),                         # ddp over shared memory: the same
    (_job("fedavg"), [True]),                      # a client model of its own
    (_job("hogwild"), [False]),                    # the shared parameters, as they are
    (_job("ddp", comm="gloo"), [False]),           # inside torch's DDP, as it is
    (_job(workers=2), []),                         # no more workers than cores
    (_job(processes=2), []),                       # ranks take turns in a process a core
    (_job(device="cuda"), []),
    (_job("a3c"), []),                             # RL actors: nothing to rehearse
], ids=["sync", "ddp-shm", "fedavg", "hogwild", "ddp-gloo", "2-workers", "taking-turns",
        "cuda", "rl"])
def test_the_parent_rehearses_in_the_layout_its_workers_train_in(monkeypatch, job, rehearsed):
    monkeypatch.setattr(rehearsal, "backward_ends_forking", lambda: False)
    layouts, trims = [], []
    monkeypatch.setattr(rehearsal, "rehearse_first_steps",
                        lambda *args, channels_last, batch_sizes: layouts.append(channels_last))
    monkeypatch.setattr(attempt, "release_free_heap", lambda: trims.append(1))
    attempt._prepare_to_fork(job)
    assert layouts == rehearsed
    assert trims == [1]   # whether or not it rehearsed


def _fit(model, **settings):
    train, test = image_data()
    return mptrain.fit(model, train, test, strategy="sync", workers=2, epochs=2, batch_size=8,
                       lr=0.1, seed=4, threads_per_worker=1, start_method=fork_or_skip(),
                       **settings)


@pytest.mark.timeout(120)
def test_a_rehearsed_run_trains_exactly_as_an_unrehearsed_one(monkeypatch):
    """With more workers than cores the parent rehearses before it forks; what the workers
    train must not change by one bit (same model, same random numbers)."""
    if rehearsal.backward_ends_forking():
        pytest.skip("a GPU is visible: the parent does not rehearse")
    calls = []
    real = rehearsal.rehearse_first_steps

    def counted(*args, **kwargs):
        calls.append(real(*args, **kwargs))
        return calls[-1]

    initial = RecordingConvNet()
    monkeypatch.setattr(plan_module, "usable_cores", lambda: 1)   # 2 workers > 1 core
    # A process per worker, as for strategies whose ranks do not take turns (hogwild).
    monkeypatch.setattr(plan_module, "turn_taking_processes", lambda *args: None)
    monkeypatch.setattr(rehearsal, "rehearse_first_steps", counted)
    rehearsed = _fit(_copy(initial))
    assert calls == [True]

    monkeypatch.setattr(rehearsal, "rehearse_first_steps", lambda *args, **kwargs: False)
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
