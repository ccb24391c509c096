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
from mptrain.report.metrics import RoundMetrics, combine
from mptrain.report.summary import CUDA_HOST_TIME, result_lines, run_profile

from round_reports import Report


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


def test_forward_backward_and_optimizer_are_laps_inside_compute(clock):
    round_clock = RoundClock(CountingGroup())
    for part, seconds in (("forward", 1.0), ("backward", 2.0), ("optimizer", 0.5)):
        clock.now += seconds
        round_clock.lap_part(part)
    clock.now += 0.25           # the step's bookkeeping: compute, in no part
    round_clock.add("compute", round_clock.lap())
    result = round_clock.finish()
    assert (result.forward, result.backward, result.optimizer, result.compute) == \
        (1.0, 2.0, 0.5, 3.75)


def timed(compute, data, collective, waiting, forward=0.0, backward=0.0, optimizer=0.0):
    return dict(compute=compute, forward=forward, backward=backward, optimizer=optimizer,
                data=data, collective=collective, waiting=waiting)


def test_ranks_are_averaged_and_shares_are_of_the_steps_time():
    ranks = [timed(8.0, 1.0, 1.0, 0.5, 3.0, 4.0, 1.0), timed(6.0, 1.0, 3.0, 2.5, 2.0, 3.0, 1.0)]
    mean = mean_over_ranks(ranks)
    assert mean == timed(7.0, 1.0, 2.0, 1.5, 2.5, 3.5, 1.0)
    assert shares(mean) == pytest.approx(timed(0.7, 0.1, 0.2, 0.15, 0.25, 0.35, 0.1))
    assert describe(shares(mean)) == ("compute 70% (forward 25%, backward 35%, optimizer "
                                      "10%), data 10%, collective 20% (waiting for peers 15%)")
    # A program that does not time the parts of its compute: they are not printed.
    assert describe(shares(timed(7.0, 1.0, 2.0, 1.5))) == \
        "compute 70%, data 10%, collective 20% (waiting for peers 15%)"
    assert mean_over_ranks([ranks[0], None]) is None   # a rank that did not time its round


def test_a_rounds_row_gets_the_ranks_mean_seconds_per_phase():
    seconds = timed(1.0, 0.25, 0.5, 0.25, 0.25, 0.5, 0.125)
    row = combine([Report(0, {"profile": seconds}), Report(1, {"profile": seconds})],
                  "classification").as_dict()
    assert {k: row[k] for k in row if k.startswith("time_")} == \
        {f"time_{phase}": value for phase, value in seconds.items()}
    untimed = combine([Report(0, {}), Report(1, {})], "classification").as_dict()
    assert not any(k.startswith("time_") for k in untimed)


def test_the_runs_profile_sums_its_rounds_and_needs_every_round():
    def row(**extras):
        return RoundMetrics(1, 0.1, None, None, None, 1.0, 1.0, 1, 1, 0, extras=extras)
    columns = {f"time_{phase}": value
               for phase, value in timed(1.0, 0.5, 0.5, 0.25, 0.5, 0.25, 0.125).items()}
    assert run_profile([row(**columns), row(**columns)]) == timed(2.0, 1.0, 1.0, 0.5, 1.0, 0.5,
                                                                  0.25)
    assert run_profile([row(**columns), row()]) is None
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
    inside = part["forward"] + part["backward"] + part["optimizer"]
    assert min(part["forward"], part["backward"], part["optimizer"]) > 0
    assert inside <= part["compute"] + 1e-9
    assert all(value >= 0 for value in part.values())


def test_on_a_gpu_the_line_says_its_times_are_the_hosts():
    timed = {"compute": 0.47, "forward": 0.21, "backward": 0.2, "optimizer": 0.05,
             "data": 0.08, "collective": 0.45, "waiting": 0.06}
    summary = {"final_train_loss": 0.1, "wall_s": 1.0, "workers": 2, "time_shares": timed}
    on_cpu = [line for line in result_lines({**summary, "device": "cpu"}, None)
              if line.startswith("step time per rank")]
    on_gpu = [line for line in result_lines({**summary, "device": "cuda"}, None)
              if line.startswith("step time per rank")]
    assert on_gpu == [on_cpu[0] + "; " + CUDA_HOST_TIME]
    assert "host time" not in on_cpu[0]
