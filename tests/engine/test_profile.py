"""The step profile: which phase each second of a rank's round goes to, how the parent
combines ranks, and what a real synchronous run reports."""

import pytest
import torch
import torch.nn as nn
from torch.utils.data import TensorDataset

import mptrain
from mptrain.comm.shm import WaitCounts
from mptrain.engine import profile
from mptrain.engine.profile import RoundClock, describe, mean_over_ranks, shares
from mptrain.report.metrics import EpochMetrics, combine
from mptrain.report.summary import run_profile


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


class CountingGroup:
    def __init__(self):
        self.waits = WaitCounts(seconds=2.0)


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(profile.time, "perf_counter", fake)
    return fake


def test_a_timed_call_counts_in_its_phase_and_not_in_the_lap_around_it(clock):
    group = CountingGroup()
    round_clock = RoundClock(group)

    def collective():
        clock.now += 3.0        # 3 s inside the collective ...
        group.waits.seconds += 2.5   # ... 2.5 of them at a barrier

    average = round_clock.timed(collective, "collective")
    clock.now += 1.0
    round_clock.add("data", round_clock.lap())
    clock.now += 4.0
    average()
    clock.now += 0.5
    round_clock.add("compute", round_clock.lap())
    result = round_clock.finish()
    assert (result.data, result.compute, result.collective, result.waiting) == \
        (1.0, 4.5, 3.0, 2.5)


def test_a_group_that_does_not_count_its_waits_reports_none_waited(clock):
    round_clock = RoundClock(object())
    assert round_clock.finish().waiting == 0.0


def test_ranks_are_averaged_and_shares_are_of_the_steps_time():
    ranks = [{"compute": 8.0, "data": 1.0, "collective": 1.0, "waiting": 0.5},
             {"compute": 6.0, "data": 1.0, "collective": 3.0, "waiting": 2.5}]
    mean = mean_over_ranks(ranks)
    assert mean == {"compute": 7.0, "data": 1.0, "collective": 2.0, "waiting": 1.5}
    assert shares(mean) == pytest.approx({"compute": 0.7, "data": 0.1, "collective": 0.2,
                                          "waiting": 0.15})
    assert describe(shares(mean)) == \
        "compute 70%, data 10%, collective 20% (waiting for peers 15%)"
    assert mean_over_ranks([ranks[0], None]) is None   # a rank that did not time its round


class Report:
    def __init__(self, rank, extras):
        self.index, self.rank, self.steps, self.train_samples = 0, rank, 4, 64
        self.train_loss_sum, self.train_started, self.train_ended = 64.0, 1.0, 2.0
        self.eval_loss_sum, self.eval_correct, self.eval_count = 0.0, 0, 0
        self.minor_faults, self.evaluated_at, self.extras = 0, 2.0, extras


def test_a_rounds_row_gets_the_ranks_mean_seconds_per_phase():
    timed = {"compute": 1.0, "data": 0.25, "collective": 0.5, "waiting": 0.25}
    row = combine([Report(0, {"profile": timed}), Report(1, {"profile": timed})],
                  "classification").as_dict()
    assert {k: row[k] for k in row if k.startswith("time_")} == \
        {"time_compute": 1.0, "time_data": 0.25, "time_collective": 0.5, "time_waiting": 0.25}
    untimed = combine([Report(0, {}), Report(1, {})], "classification").as_dict()
    assert not any(k.startswith("time_") for k in untimed)


def test_the_runs_profile_sums_its_rounds_and_needs_every_round():
    def row(**extras):
        return EpochMetrics(1, 0.1, None, None, None, 1.0, 1.0, 1, 1, 0, extras=extras)
    timed = dict(time_compute=1.0, time_data=0.5, time_collective=0.5, time_waiting=0.25)
    assert run_profile([row(**timed), row(**timed)]) == \
        {"compute": 2.0, "data": 1.0, "collective": 1.0, "waiting": 0.5}
    assert run_profile([row(**timed), row()]) is None
    assert run_profile([]) is None


@pytest.mark.timeout(120)
def test_a_sync_run_says_where_its_ranks_time_went():
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(256, 6), torch.randint(0, 3, (256,)))
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))
    result = mptrain.fit(model, data, strategy="sync", workers=2, epochs=2, batch_size=16,
                         sync_every=1, threads_per_worker=1, quiet=True)
    part = result.summary["time_shares"]
    assert part["compute"] + part["data"] + part["collective"] == pytest.approx(1.0)
    assert 0.0 < part["waiting"] <= part["collective"]   # 16 meetings an epoch: some wait
    assert all(value >= 0 for value in part.values())
