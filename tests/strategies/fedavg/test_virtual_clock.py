"""fedavg on the virtual clock (``strategies.fedavg.virtual_clock``): the rounds the clock
plays (no processes), and short runs -- the clock adds time and drops, never changes what
the kept clients compute, and gives the same times and model whatever --workers is."""

import copy
import json

import pytest
import torch

import mptrain
from mptrain.config import TrainConfig
from mptrain.errors import UserError
from mptrain.federated.clock import client_speeds
from mptrain.federated.clock.speeds import DEFAULT_DOWN_BYTES_PER_S, DEFAULT_UP_BYTES_PER_S
from mptrain.strategies.fedavg.virtual_clock import RoundClock, RoundSampler

from fedavg_workload import RUN, make_data, make_model, make_test_data

SIZES = [20] * 12                       # fedavg_workload: 240 samples, 12 iid clients
MODEL_BYTES = 4 * (6 * 16 + 16 + 16 * 3 + 3)


def config(**options):
    return TrainConfig(**{"strategy": "fedavg", "clients": 12, "clients_per_round": 4,
                          "batch_size": 8, "seed": 0, **options})


def test_without_speeds_the_sampler_samples_as_before():
    sampler = RoundSampler(config(), SIZES, rows=4, model_bytes=MODEL_BYTES)
    clocked = RoundSampler(config(client_speeds="constant"), SIZES, 4, MODEL_BYTES)
    for index in range(3):
        assert sampler.sample(index) == clocked.sample(index)
    assert sampler.figures == {} and clocked.figures["virtual_time_s"] > 0


def test_a_round_lasts_its_slowest_update_and_time_adds_up():
    clock = RoundClock(config(client_speeds="constant:1"), SIZES, MODEL_BYTES)
    one = 20 * 0.001 + MODEL_BYTES * (1 / DEFAULT_UP_BYTES_PER_S + 1 / DEFAULT_DOWN_BYTES_PER_S)
    _, first = clock.play_to(0)
    _, second = clock.play_to(1)
    assert first["round_virtual_s"] == pytest.approx(one)
    assert second["virtual_time_s"] == pytest.approx(2 * one)


def test_a_resumed_clock_replays_the_rounds_before():
    options = dict(client_speeds="lognormal", round_deadline=0.3, over_select=1.5)
    whole = RoundClock(config(**options), SIZES, MODEL_BYTES)
    played = [whole.play_to(i) for i in range(5)]
    resumed = RoundClock(config(**options), SIZES, MODEL_BYTES)
    assert resumed.play_to(3) == played[3] and resumed.play_to(4) == played[4]
    figures = [f for _, f in played]
    assert sum(f["late"] for f in figures) > 0 and all(f["sampled"] == 6 for f in figures)
    assert all(len(trained) <= 4 for trained, _ in played)


def test_only_online_clients_are_sampled(tmp_path):
    trace = {str(c): {"active": [0], "inactive": [1000], "finish_time": 2000}
             for c in range(6)}            # clients 6-11: no trace, always online
    trace.update({str(c): {"active": [5000], "inactive": [6000], "finish_time": 10000}
                  for c in range(6, 12)})
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(trace))
    clock = RoundClock(config(client_speeds="constant", availability_trace=str(path)),
                       SIZES, MODEL_BYTES)
    for index in range(3):
        trained, _ = clock.play_to(index)
        assert trained and all(c < 6 for c in trained)


@pytest.mark.parametrize("options, said", [
    (dict(round_deadline=5.0), "add client_speeds"),
    (dict(over_select=2.0), "add client_speeds"),
    (dict(client_speeds="constant", over_select=0.5), "over_select must be >= 1"),
    (dict(client_speeds="constant", over_select=2.0, sampling="poisson"), "drop one"),
    (dict(client_speeds="constant", over_select=2.0, dp_clip=1.0, dp_noise=1.0,
          sampling="poisson"), "drop one"),
    (dict(client_speeds="constant", availability_trace="t.json", dp_clip=1.0,
          dp_noise=1.0, sampling="poisson"), "privacy accountant"),
    (dict(client_speeds="constant:-1"), "must be > 0"),
])
def test_bad_clock_settings_are_refused_in_one_line(options, said):
    with pytest.raises(UserError) as caught:
        mptrain.fit(make_model(), make_data(), **{**RUN, **options})
    assert said in str(caught.value) and "\n" not in str(caught.value)


def fit(model, **options):
    return mptrain.fit(model, make_data(), make_test_data(),
                       **{**RUN, "workers": 1, **options})


@pytest.mark.timeout(120)
def test_the_clock_adds_time_and_changes_nothing_else():
    initial = make_model()
    plain = fit(copy.deepcopy(initial), rounds=2)
    clocked = fit(copy.deepcopy(initial), rounds=2, client_speeds="lognormal")
    for name, tensor in plain.model.state_dict().items():
        assert torch.equal(tensor, clocked.model.state_dict()[name]), name
    times = [m.extras["virtual_time_s"] for m in clocked.rounds]
    assert 0 < times[0] < times[1]
    assert "virtual_time_s" not in plain.rounds[0].extras


def _deadline(seed=0):
    """A deadline most clients of the workload miss (5 of 12 make it)."""
    speeds = client_speeds("lognormal", 12, seed)
    seconds = sorted(speeds.update_seconds(c, 20, 1, MODEL_BYTES) for c in range(12))
    return seconds[4]


@pytest.mark.timeout(180)
def test_deadline_and_over_selection_are_the_same_whatever_the_workers(tmp_path):
    initial = make_model()
    options = dict(rounds=3, client_speeds="lognormal", round_deadline=_deadline(),
                   over_select=1.5)
    one = fit(copy.deepcopy(initial), **options)
    two = fit(copy.deepcopy(initial), **{**options, "workers": 2}, out=tmp_path)
    keys = ("virtual_time_s", "clients", "late", "cancelled", "sampled")
    assert [[m.extras[k] for k in keys] for m in one.rounds] == \
        [[m.extras[k] for k in keys] for m in two.rounds]
    assert sum(m.extras["late"] for m in one.rounds) > 0
    assert all(m.extras["clients"] <= 4 for m in one.rounds)
    for name, tensor in one.model.state_dict().items():
        assert torch.equal(tensor, two.model.state_dict()[name]), name
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["virtual_time_s"] for r in rows if "virtual_time_s" in r] == \
        [m.extras["virtual_time_s"] for m in one.rounds]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["virtual_time_s"] == one.rounds[-1].extras["virtual_time_s"]


def test_a_trace_naming_unknown_clients_is_one_line_before_the_run(tmp_path, capsys):
    from user_errors import fail

    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"99": {"active": [0], "inactive": [10]}}))
    err = fail(["run", "--strategy", "fedavg", "--data", "synthetic:0,0", "--rounds", "1",
                "--client-speeds", "constant", "--availability-trace", str(path)], capsys)
    assert "--availability-trace file" in err and "unknown client 99" in err


def test_a_round_nobody_finishes_in_time_says_so():
    from types import SimpleNamespace

    from mptrain.strategies.fedavg.report import round_notes

    metrics = SimpleNamespace(epoch=3, extras={"clients": 0, "sampled": 5, "late": 4,
                                               "offline": 1, "reported": 0})
    assert round_notes(config(), metrics) == [
        "round 3: none of the 5 sampled clients reported in time (4 late, 1 offline); "
        "the round changed nothing"]


@pytest.mark.parametrize("seconds, said", [(0.00213, "virtual 0.00213 s (2 late)"),
                                           (12345.6, "virtual 12,346 s (2 late)")])
def test_the_round_line_says_the_virtual_time(monkeypatch, seconds, said):
    from types import SimpleNamespace

    from mptrain.strategies.fedavg import report

    monkeypatch.setattr(report, "metric_parts", lambda metrics: [])   # losses: not here
    metrics = SimpleNamespace(epoch=1, extras={"clients": 3, "virtual_time_s": seconds,
                                               "late": 2, "offline": 0})
    assert said in report.round_line(metrics)


@pytest.mark.timeout(120)
def test_a_resumed_run_continues_the_clock(tmp_path):
    initial = make_model()
    options = dict(client_speeds="lognormal", round_deadline=_deadline(), over_select=1.5)
    whole = fit(copy.deepcopy(initial), rounds=3, **options)
    fit(copy.deepcopy(initial), rounds=2, out=tmp_path, checkpoint_every=1, **options)
    resumed = fit(copy.deepcopy(initial), rounds=3, resume=tmp_path, out=tmp_path, **options)
    assert resumed.rounds[-1].extras["virtual_time_s"] == \
        whole.rounds[-1].extras["virtual_time_s"]
    for name, tensor in whole.model.state_dict().items():
        assert torch.equal(tensor, resumed.model.state_dict()[name]), name


@pytest.mark.timeout(120)
def test_a_run_stopped_at_its_target_has_the_full_runs_virtual_times():
    # benchmarks/fl_async.py stops at the target and reads the time to it from the stopped
    # run: its rounds must be the full run's first ones, clock and deadline drops included.
    options = dict(rounds=6, client_speeds="lognormal", round_deadline=_deadline(),
                   over_select=1.5)
    full = fit(make_model(), **options)
    accuracies = [m.test_accuracy for m in full.rounds]
    target = sorted(accuracies)[-3]
    first = next(i for i, a in enumerate(accuracies) if a >= target) + 1
    stopped = fit(make_model(), target_accuracy=target, **options)
    assert len(stopped.rounds) == first < 6
    assert [(m.extras["virtual_time_s"], m.test_accuracy) for m in stopped.rounds] == \
        [(m.extras["virtual_time_s"], m.test_accuracy) for m in full.rounds[:first]]
