"""Real fedbuff runs on the tiny fedavg workload: the bitwise same model and per-client
scores on one and two workers, what each server step reports, a resume that continues the
same events, and the refusals (one line, exit 2) of flags, config files and ``fit()``."""

import copy
import json

import pytest
import torch

import mptrain
from mptrain.cli import main
from mptrain.config import TrainConfig
from mptrain.errors import UserError

from fedavg_workload import RUN, make_data, make_model, make_test_data
from user_errors import fail

FEDBUFF = {**{k: v for k, v in RUN.items() if k != "clients_per_round"},
           "strategy": "fedbuff", "concurrency": 5, "buffer_size": 2, "workers": 1}


def fit(model, **options):
    return mptrain.fit(model, make_data(), make_test_data(), **{**FEDBUFF, **options})


def assert_same(a, b):
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(x, y), name


@pytest.mark.timeout(180)
def test_one_and_two_workers_give_the_bitwise_same_model():
    initial = make_model()
    options = dict(rounds=4, server_optimizer="adam", server_lr=0.05, max_staleness=2,
                   client_eval_every=2, personalize="finetune:2")
    one = fit(copy.deepcopy(initial), **options)
    two = fit(copy.deepcopy(initial), workers=2, **options)
    assert_same(one.model, two.model)
    assert [r.as_dict()["staleness"] for r in one.rounds] == \
        [r.as_dict()["staleness"] for r in two.rounds]
    # Each rank scores its slice of the clients, fine-tuned by (seed, step, client): the
    # same figures whoever scores them.
    for key in ("client_acc_mean", "client_acc_p10", "personal_acc_mean", "personal_loss"):
        assert [r.as_dict().get(key) for r in one.rounds] == \
            [r.as_dict().get(key) for r in two.rounds], key
    assert [r.as_dict().get("clients_personalized") for r in one.rounds] == [None, 12, None, 12]


@pytest.mark.timeout(180)
def test_a_resumed_run_continues_the_same_events_bitwise(tmp_path):
    initial = make_model()
    whole = fit(copy.deepcopy(initial), rounds=4)
    fit(copy.deepcopy(initial), rounds=2, out=tmp_path, checkpoint_every=1)
    checkpoint = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert len(checkpoint["ranks"][0]["fedbuff"]["numbers"]) > 0   # updates in flight
    # On two workers: the updates in flight go back into the rows every rank reads.
    resumed = fit(copy.deepcopy(initial), rounds=4, out=tmp_path, resume=tmp_path, workers=2)
    assert_same(whole.model, resumed.model)
    rows = [r.as_dict() for r in whole.rounds]
    for key in ("virtual_time_s", "staleness", "in_flight", "clients"):
        assert [r[key] for r in rows] == [r.as_dict()[key] for r in resumed.rounds], key
    # What each step reports: its version, a full buffer, K in flight, time moving on.
    assert [r["version"] for r in rows] == [1, 2, 3, 4]
    assert all(len(r["staleness"]) == r["buffered"] == 2 and r["in_flight"] == 5
               for r in rows)
    times = [r["virtual_time_s"] for r in rows]
    assert times == sorted(times) and times[0] > 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    histogram = summary["staleness_histogram"]
    assert sum(histogram.values()) == 8 and summary["virtual_time_s"] == times[-1]
    assert histogram == {str(s): sum(r["staleness"].count(s) for r in rows)
                         for s in map(int, histogram)}
    with pytest.raises(UserError, match="updates in flight are not this run's schedule's"):
        fit(copy.deepcopy(initial), rounds=6, concurrency=6, out=tmp_path, resume=tmp_path)


@pytest.mark.timeout(120)
def test_fedasync_and_the_stacked_path_train(capsys):
    result = fit(make_model(), rounds=3, buffer_size=1, staleness_weight="hinge:0.5,1",
                 vectorize_clients="on", quiet=False)
    out = capsys.readouterr().out
    assert "FedAsync: 5 clients training at once, a server step every 1 update, " \
           "staleness weight hinge" in out
    assert "virtual clock: the default speeds (lognormal" in out
    assert result.rounds[0].as_dict()["client_path"].startswith("vectorized")
    assert all(torch.isfinite(t).all() for t in result.model.state_dict().values())


@pytest.mark.parametrize("settings, needle", [
    (dict(buffer_size=6), "buffer_size 6 is more than concurrency 5"),
    (dict(concurrency=13), "concurrency 13 is more than clients 12"),
    (dict(max_staleness=-1), "max_staleness must be a non-negative integer"),
    (dict(staleness_weight="sqrt"), "staleness_weight 'sqrt' is none of"),
    (dict(personalize="fedper:last:1", personal_head_epochs=3),
     "personal_head_epochs is fedrep's; personalize fedper has no head phase"),
    (dict(dp_clip=1.0, dp_noise=1.0), "dp_clip does nothing with strategy fedbuff; use "
                                      "strategy fedavg sampling poisson for DP-FedAvg "
                                      r"\(the accountant assumes Poisson sampling"),
])
def test_fit_refuses_what_cannot_hold(settings, needle):
    with pytest.raises(UserError, match=needle):
        fit(make_model(), **settings)


@pytest.mark.parametrize("strategy", ["fedavg", "sync"])
@pytest.mark.parametrize("name, value", [("concurrency", 3), ("buffer_size", 2),
                                         ("staleness_weight", "constant"),
                                         ("max_staleness", 1)])
def test_synchronous_strategies_refuse_the_staleness_settings(strategy, name, value):
    flag = "--" + name.replace("_", "-")
    with pytest.raises(UserError, match=f"{flag} does nothing with --strategy {strategy}; "
                                        "use --strategy fedbuff"):
        TrainConfig.from_settings({"strategy": strategy, name: value})


def test_the_command_line_and_a_config_file_say_the_same(tmp_path, capsys):
    config = tmp_path / "run.toml"
    config.write_text('strategy = "fedbuff"\nconcurrency = 4\nbuffer-size = 5\n')
    assert "--buffer-size 5 is more than --concurrency 4" in \
        fail(["run", "--config", str(config), "--clients", "10"], capsys)
    assert "--max-staleness must be a non-negative integer" in \
        fail(["run", "--strategy", "fedbuff", "--max-staleness", "-2"], capsys)
    assert "--staleness-weight does nothing with --strategy fedavg" in \
        fail(["run", "--strategy", "fedavg", "--staleness-weight", "constant"], capsys)
    assert main(["run", "--help"]) == 0
    federated = capsys.readouterr().out.split("Federated options")[1]
    for flag in ("--concurrency", "--buffer-size", "--staleness-weight", "--max-staleness"):
        assert flag in federated, flag
    settings = dict(strategy="fedbuff", clients=20, concurrency=8, buffer_size=3,
                    staleness_weight="polynomial:1", max_staleness=4)
    assert TrainConfig.from_settings(settings).fedavg.buffer_size == 3


def test_k_and_b_default_from_the_clients_a_round_would_sample():
    f = TrainConfig.from_settings(dict(strategy="fedbuff", clients=100)).fedavg
    from mptrain.strategies.fedbuff.settings import buffer_size_of, concurrency_of

    assert (concurrency_of(f), buffer_size_of(f)) == (10, 5)


def test_the_console_says_virtual_time_at_every_scale():
    from mptrain.strategies.fedbuff.report import virtual_seconds

    assert [virtual_seconds(s) for s in (0.2249, 93.14, 4210.4, 99000)] == \
        ["0.225s", "93.1s", "4,210s", "27.5h"]


@pytest.mark.timeout(180)
def test_a_target_accuracy_stops_at_the_first_step_reaching_it_at_the_same_virtual_time():
    # benchmarks/fl_async.py stops its runs at the target: the stopped run's steps, their
    # accuracy and virtual time, must be the full run's first ones.
    full = fit(make_model(), rounds=8)
    rows = [r.as_dict() for r in full.rounds]
    target = sorted(r["test_accuracy"] for r in rows)[-3]   # reached before the last step
    first = next(i for i, r in enumerate(rows) if r["test_accuracy"] >= target) + 1
    stopped = fit(make_model(), rounds=8, target_accuracy=target)
    assert len(stopped.rounds) == first < 8
    assert stopped.summary["target_reached_at_round"] == first
    assert [(r.as_dict()["virtual_time_s"], r.as_dict()["test_accuracy"])
            for r in stopped.rounds] == \
        [(r["virtual_time_s"], r["test_accuracy"]) for r in rows[:first]]
