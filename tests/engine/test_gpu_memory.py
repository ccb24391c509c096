"""The fullest GPU's peak memory (its ranks' peaks together): reported per round on a GPU,
kept in summary.json, absent on CPU."""

from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn
from torch.utils.data import TensorDataset

import mptrain
from mptrain.api import bundle_from_datasets
from mptrain.config import TrainConfig
from mptrain.engine.gpu_memory import GPU_PEAK, device_memory, start_round_peak
from mptrain.report.metrics import RoundMetrics, combine
from mptrain.report.summary import build_summary

from round_reports import Report

PLAN = SimpleNamespace(workers=2, processes=None, threads=1, start_method="fork", cores=2)


def test_a_cpu_rank_reports_no_gpu_memory():
    assert device_memory(torch.device("cpu")) == {}


def test_each_round_reports_its_own_peak_not_the_runs(monkeypatch):
    # Every round reported torch's peak since the process began: a round that needed a
    # tenth of the first round's memory still said the first round's figure.
    peaks = {0: 0}

    def allocate(size):
        peaks[0] = max(peaks[0], size)

    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats",
                        lambda index: peaks.__setitem__(index, 0))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda index: peaks[index])
    gpu = torch.device("cuda", 0)
    reported = []
    for need in (1000, 100):
        start_round_peak(gpu)
        allocate(need)
        reported.append(device_memory(gpu)[GPU_PEAK])
    assert reported == [1000, 100]
    start_round_peak(torch.device("cpu"))   # nothing to reset, and no CUDA call


@pytest.mark.skipif(torch.cuda.device_count() == 0, reason="needs a CUDA device")
def test_a_rounds_peak_on_a_gpu_starts_at_what_is_held():
    gpu = torch.device("cuda", 0)
    big = torch.empty(64 << 20, dtype=torch.uint8, device=gpu)
    del big
    start_round_peak(gpu)
    small = torch.empty(1 << 20, dtype=torch.uint8, device=gpu)
    assert device_memory(gpu)[GPU_PEAK] < 64 << 20
    del small


def test_a_round_keeps_the_fullest_gpus_peak_and_the_summary_the_runs():
    apart = combine([Report(0, {GPU_PEAK: 300, "gpu_index": 0}),
                     Report(1, {GPU_PEAK: 500, "gpu_index": 1})], "classification")
    assert apart.as_dict()[GPU_PEAK] == 500
    sharing = combine([Report(0, {GPU_PEAK: 300, "gpu_index": 0}),
                       Report(1, {GPU_PEAK: 500, "gpu_index": 0}),
                       Report(2, {GPU_PEAK: 600, "gpu_index": 1})], "classification")
    assert sharing.as_dict()[GPU_PEAK] == 800
    assert GPU_PEAK not in combine([Report(0, {}), Report(1, {})], "classification").as_dict()

    def epoch(number, peak):
        return RoundMetrics(epoch=number, train_loss=0.5, test_loss=0.4, test_accuracy=0.9,
                            test_mse=None, samples_per_s=50.0, epoch_s=2.0, train_samples=100,
                            steps=4, minor_faults=0, extras={GPU_PEAK: peak})
    inputs, targets = torch.randn(20, 4), torch.randint(0, 3, (20,))
    bundle = bundle_from_datasets(TensorDataset(inputs, targets), None)
    summary = build_summary(TrainConfig(), bundle, nn.Linear(4, 3), "mine", PLAN,
                            [epoch(1, 700), epoch(2, 600)], wall_s=5.0, startup_s=1.0)
    assert summary[GPU_PEAK] == 700
    on_cpu = build_summary(TrainConfig(), bundle, nn.Linear(4, 3), "mine", PLAN,
                           [RoundMetrics(epoch=1, train_loss=0.5, test_loss=None,
                                         test_accuracy=None, test_mse=None, samples_per_s=1.0,
                                         epoch_s=1.0, train_samples=1, steps=1,
                                         minor_faults=0)], wall_s=1.0, startup_s=1.0)
    assert GPU_PEAK not in on_cpu


@pytest.mark.timeout(120)
@pytest.mark.skipif(torch.cuda.device_count() == 0, reason="needs a CUDA device")
def test_a_gpu_run_says_how_much_memory_its_fullest_rank_held():
    inputs = torch.randn(256, 4)
    data = TensorDataset(inputs, (inputs[:, 0] > 0).long())
    result = mptrain.fit(nn.Linear(4, 2), data, data, epochs=1, device="cuda", quiet=True)
    assert result.summary[GPU_PEAK] > 256 * 4 * 4   # the resident data set at least
