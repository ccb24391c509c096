"""--personalize on real fedavg runs (issue 54): the personalized models scored beside the
global one on each client's own test split (figures, rows, banner); fine-tuning and Ditto
leave FedAvg's global model as it was, bit for bit; FedPer never averages its layers; the
same bits on two workers as on one; a resume continues bitwise with the personal state in
a mapped file; stacked FedPer agrees with one client at a time; refusals in one line."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn as nn

import mptrain
from mptrain.errors import UserError
from mptrain.federated.personal.store import STORE_FILE

pytestmark = pytest.mark.timeout(180)


def synthetic():
    return mptrain.load_data("synthetic:1,1", clients=8, seed=0)


def normed_model(seed=3):
    """Two linear layers with a LayerNorm between them (BatchNorm would refuse a client's
    last batch of one sample)."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(60, 16), nn.LayerNorm(16), nn.Tanh(), nn.Linear(16, 10))


def frozen(model, *layers):
    """``model`` with the parameters of ``layers`` frozen (``requires_grad`` False)."""
    for layer in layers:
        model[layer].requires_grad_(False)
    return model


def run(out=None, model=None, **options):
    settings = dict(strategy="fedavg", workers=1, threads_per_worker=1, rounds=2,
                    local_epochs=1, clients_per_round=4, client_eval_every=1, seed=1, lr=0.05)
    settings.update(options)
    return mptrain.fit(model or normed_model(), synthetic(), out=out, **settings)


def same_model(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(),
                                                  b.state_dict().values()))


def rows_of(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def plain():
    return run()


def test_finetuning_scores_each_client_and_leaves_the_global_model(plain, tmp_path):
    tuned = run(out=tmp_path, personalize="finetune:3")
    assert same_model(tuned.model, plain.model)
    summary = tuned.summary
    assert summary["personalize"] == "finetune:3"
    assert summary["client_acc_mean"] == plain.summary["client_acc_mean"]
    for key in ("personal_acc_mean", "personal_acc_weighted", "personal_acc_p10"):
        assert 0 <= summary[key] <= 1
    assert summary["clients_personalized"] == 8
    rows = rows_of(tmp_path / "client_metrics.jsonl")
    last = [r for r in rows if r["round"] == 2]
    accuracies = torch.tensor([r["personal_accuracy"] for r in last], dtype=torch.float64)
    assert summary["personal_acc_mean"] == pytest.approx(accuracies.mean().item())
    assert summary["personal_acc_p10"] == pytest.approx(torch.quantile(accuracies, 0.1).item())
    weighted = sum(r["personal_accuracy"] * r["samples"] for r in last) / \
        sum(r["samples"] for r in last)
    assert summary["personal_acc_weighted"] == pytest.approx(weighted)
    assert tuned.rounds[-1].as_dict()["personal_acc_mean"] == summary["personal_acc_mean"]


def test_ditto_keeps_fedavgs_global_model_and_the_same_bits_on_two_workers(plain):
    one = run(personalize="ditto:0.5")
    assert same_model(one.model, plain.model)          # the FedAvg update is untouched
    assert one.summary["personal_acc_mean"] != one.summary["client_acc_mean"]
    two = run(personalize="ditto:0.5", workers=2)
    assert same_model(two.model, one.model)
    assert {k: v for k, v in two.summary.items() if k.startswith("personal")} == \
        {k: v for k, v in one.summary.items() if k.startswith("personal")}


def test_fedper_never_averages_its_layers():
    initial = normed_model()
    result = run(model=normed_model(), personalize="fedper:3")
    trained, start = result.model.state_dict(), initial.state_dict()
    assert torch.equal(trained["3.weight"], start["3.weight"])   # the head stays per client
    assert not torch.equal(trained["0.weight"], start["0.weight"])   # the body is averaged
    assert result.summary["clients_personalized"] > 0


@pytest.mark.parametrize("options", [
    dict(attack="gaussian:1", malicious_fraction=0.25),   # noise in every column of a row
    dict(sampling="poisson", dp_clip=0.5, dp_noise=0.8),  # noise on every column of the mean
    dict(sampling="poisson", dp_clip=0.5, dp_noise=0.8, server_optimizer="adam")])
def test_no_row_and_no_noise_moves_the_global_models_personal_layers(options):
    """The server never receives FedPer's layers: before the fix a gaussian attacker's row
    and DP's noise moved them in the global model, where never-trained clients start."""
    initial = normed_model()
    result = run(model=normed_model(), personalize="fedper:3", **options)
    trained, start = result.model.state_dict(), initial.state_dict()
    assert torch.equal(trained["3.weight"], start["3.weight"])
    assert torch.equal(trained["3.bias"], start["3.bias"])
    assert not torch.equal(trained["0.weight"], start["0.weight"])


@pytest.mark.parametrize("vectorize", ["off", "on"])
def test_fedprox_pulls_personal_layers_to_the_clients_own_start(vectorize):
    """With one client FedPer is FedAvg: its personal model is FedAvg's global model, so
    FedProx must pull its head to where the client left it, not to the global model's
    never-trained head (before the fix: personal loss 0.744 against FedAvg's 0.584)."""
    import copy

    from fedavg_workload import RUN, make_data, make_model, make_test_data

    initial = make_model()
    lone = {**RUN, "workers": 1, "clients": 1, "clients_per_round": 1, "prox_mu": 1.0,
            "client_eval_every": 1, "vectorize_clients": vectorize}
    plain = mptrain.fit(copy.deepcopy(initial), make_data(), make_test_data(), **lone)
    fedper = mptrain.fit(copy.deepcopy(initial), make_data(), make_test_data(), **lone,
                         personalize="fedper:2")
    assert fedper.summary["personal_loss"] == pytest.approx(plain.summary["client_loss"],
                                                            rel=1e-6)
    assert fedper.summary["personal_acc_mean"] == plain.summary["client_acc_mean"]


@pytest.mark.parametrize("vectorize", ["off", "on"])
def test_fedrep_leaves_a_layer_the_user_froze_frozen(vectorize):
    """Before the fix FedRep's phases thawed every parameter they froze, the user's too."""
    model = normed_model()
    model[0].weight.requires_grad_(False)
    start = model[0].weight.detach().clone()
    result = run(model=model, personalize="fedrep:last:1", personal_head_epochs=1,
                 vectorize_clients=vectorize)
    assert torch.equal(result.model[0].weight, start)
    assert not torch.equal(result.model[0].bias, normed_model()[0].bias)


@pytest.mark.parametrize("method, options", [
    ("fedrep:last:1", {"personal_head_epochs": 2}), ("fedbn", {}),
    # Ditto composes with a robust rule (its paper's point): the rule aggregates the global
    # model, which the personal models only read.
    ("ditto:0.1", {"aggregator": "median"})])
def test_fedrep_fedbn_and_robust_ditto_train_and_report(method, options):
    result = run(personalize=method, **options)
    assert 0 <= result.summary["personal_acc_mean"] <= 1
    assert result.summary["clients_personalized"] > 0


def test_a_resume_continues_bitwise_with_the_state_in_a_mapped_file(tmp_path, capsys):
    options = dict(personalize="fedper:1,3", personal_memory=0, rounds=3)
    whole = run(out=tmp_path / "whole", **options)
    run(out=tmp_path / "cut", checkpoint_every=1, **{**options, "rounds": 2}, quiet=False)
    shown = capsys.readouterr()
    assert "in a memory-mapped file" in shown.out + shown.err
    # The file is the run's scratch, gone when it ends (10,000 Ditto clients of the 2NN left
    # 7.4 GiB in --out): the checkpoint holds every row, and the resume maps a new one.
    assert not (tmp_path / "cut" / STORE_FILE).exists()
    assert not (tmp_path / "whole" / STORE_FILE).exists()
    resumed = run(out=tmp_path / "cut", resume=tmp_path / "cut", **options)
    assert same_model(resumed.model, whole.model)
    assert not (tmp_path / "cut" / STORE_FILE).exists()
    assert rows_of(tmp_path / "cut" / "client_metrics.jsonl") == \
        rows_of(tmp_path / "whole" / "client_metrics.jsonl")


def test_a_resume_that_asks_for_other_personal_state_is_refused_in_one_line(tmp_path, capsys):
    """Before the fix the store refused another width inside the worker (a traceback), and
    personal models begun mid-run, or FedPer's heads read as FedRep's, went unsaid."""
    from user_errors import fail

    run(out=tmp_path / "fedper", checkpoint_every=1, rounds=1, personalize="fedper:3")
    with pytest.raises(UserError, match="trained with personalize fedper:3: it holds no "
                       "personal state for ditto:0.1; resume with personalize fedper:3"):
        run(out=tmp_path / "fedper", resume=tmp_path / "fedper", personalize="ditto:0.1")
    with pytest.raises(UserError, match="no personal state for fedrep:3"):
        run(out=tmp_path / "fedper", resume=tmp_path / "fedper", personalize="fedrep:3")
    command = ["run", "--strategy", "fedavg", "--data", "synthetic:1,1", "--clients", "8",
               "--clients-per-round", "4", "--rounds", "1", "--checkpoint-every", "1",
               "--quiet", "--out", str(tmp_path / "plain")]
    from mptrain.cli import main

    assert main(command) == 0
    line = fail(command[:-2] + ["--rounds", "2", "--resume", str(tmp_path / "plain"),
                                "--personalize", "ditto:0.1"], capsys)
    assert "was trained without --personalize: it holds no personal state for ditto:0.1; " \
        "resume without --personalize, or train with --personalize ditto:0.1 in a new run " \
        "(no --resume)" in line


def test_personalize_alone_scores_the_last_round(capsys):
    result = run(personalize="finetune:1", client_eval_every=None, rounds=2, quiet=False)
    rows = [m.as_dict() for m in result.rounds]
    assert "personal_acc_mean" not in rows[0] and "personal_acc_mean" in rows[1]
    shown = capsys.readouterr()
    assert "every client evaluated after the last round" in shown.out + shown.err


@pytest.mark.parametrize("options, message", [
    (dict(personalize="fedper:9"), "no layer '9'; its layers: 0, 1, 3"),
    (dict(personalize="fedper:0,1,3"), "leaves nothing to average"),
    (dict(personalize="fedper:1,2", vectorize_clients="on",
          model=nn.Sequential(nn.Linear(60, 16), nn.BatchNorm1d(16), nn.Linear(16, 10))),
     "fedper keeps buffers .running statistics. on each client"),
    (dict(personal_memory=10), "personal_memory is about personalize"),
    (dict(personalize="fedper:3", personal_head_epochs=2), "fedrep's"),
    (dict(personalize="fedper:3", personal_memory=0), "no out folder"),
    (dict(personalize="fedrep:1", model=nn.Sequential(
        nn.Linear(60, 16), nn.BatchNorm1d(16, affine=False), nn.Linear(16, 10))),
     "fedrep: 1 hold.s. no parameters to train as the head, only buffers; the layers "
     "that do: 0, 2"),
    (dict(personalize="fedrep:3", model=frozen(normed_model(), 0, 1)),
     "every parameter outside its head .3. is frozen .requires_grad False., so its body "
     "phase has nothing to train; personalize fedper:3 trains heads on a frozen body"),
    (dict(personalize="fedrep:last:1", model=frozen(normed_model(), 3)),
     "every parameter of its head .3. is frozen"),
    (dict(personalize="fedper:0,2", model=nn.Sequential(
        nn.Linear(60, 16), nn.BatchNorm1d(16, affine=False), nn.Linear(16, 10))),
     "fedper: 0, 2 hold.s. every parameter of the model, which leaves none to average"),
])
def test_bad_input_is_refused_in_one_line(options, message):
    with pytest.raises(UserError, match=message) as refused:
        run(**options)
    assert "\n" not in str(refused.value)


def test_a_memory_budget_past_what_every_row_needs_keeps_every_row_in_memory(tmp_path):
    """1e303 MiB overflowed to infinity, and int() of it was a traceback."""
    result = run(out=tmp_path, personalize="fedper:3", personal_memory=1e303, rounds=1)
    assert result.summary["clients_personalized"] > 0
    assert not (tmp_path / STORE_FILE).exists()


def test_the_command_line_refuses_a_layer_that_does_not_exist(tmp_path, capsys):
    from user_errors import fail

    line = fail(["run", "--strategy", "fedavg", "--data", "synthetic:1,1", "--clients", "8",
                 "--clients-per-round", "4", "--rounds", "1", "--personalize", "fedper:fc9",
                 "--quiet",
                 "--out", str(tmp_path / "run")], capsys)
    assert "--personalize fedper: the model has no layer 'fc9'; its layers: linear" in line


def test_a_config_file_says_it_as_the_flags_do(tmp_path):
    from mptrain.cli import main

    config = tmp_path / "run.toml"
    config.write_text('personalize = "finetune:2"\n')
    assert main(["run", "--strategy", "fedavg", "--data", "synthetic:1,1", "--clients", "8",
                 "--clients-per-round", "4", "--rounds", "1", "--quiet", "--config",
                 str(config), "--out", str(tmp_path / "run")]) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["personalize"] == "finetune:2" and "personal_acc_p10" in summary


def test_auto_trains_personal_running_statistics_one_client_at_a_time():
    from mptrain.config import TrainConfig
    from mptrain.strategies.fedavg.cohorts import choose_path

    model = nn.Sequential(nn.Linear(60, 16), nn.BatchNorm1d(16), nn.Linear(16, 10))
    config = TrainConfig(strategy="fedavg", personalize="fedbn", vectorize_clients="auto")
    _, path = choose_path(config, model, synthetic(), workers=1)
    assert path.describe() == ("one client at a time: --personalize fedbn keeps buffers "
                               "(running statistics) on each client, which stacked cohorts "
                               "never change")


@pytest.mark.parametrize("method", ["fedper:2", "fedrep:2", "ditto:0.5"])
def test_stacked_personalization_agrees_with_one_client_at_a_time(method):
    """FedPer: each client's personal layer is its own slice of the stacked parameters;
    FedRep: a head cohort, then the bodies with the heads held; Ditto: a second cohort of
    the clients' personal models."""
    import copy

    from fedavg_workload import RUN, make_data, make_model, make_test_data

    initial = make_model()
    runs = {mode: mptrain.fit(copy.deepcopy(initial), make_data(), make_test_data(),
                              **{**RUN, "workers": 1, "clients_per_round": 6,
                                 "client_eval_every": 1, "personalize": method,
                                 "vectorize_clients": mode, "momentum": 0.5,
                                 "weight_decay": 1e-3, "personal_head_epochs":
                                 2 if method.startswith("fedrep") else None})
            for mode in ("off", "on")}
    on, off = runs["on"], runs["off"]
    assert on.summary["client_path"] == "vectorized x6"
    for name, tensor in on.model.state_dict().items():
        torch.testing.assert_close(tensor, off.model.state_dict()[name], atol=1e-5, rtol=0)
    if not method.startswith("ditto"):
        assert torch.equal(on.model[2].weight, initial[2].weight)   # never averaged
    assert on.summary["clients_personalized"] == off.summary["clients_personalized"] > 0
    for key in ("personal_acc_mean", "personal_loss"):
        assert on.summary[key] == pytest.approx(off.summary[key], abs=1e-4)


def test_the_virtual_clock_charges_the_epochs_ditto_and_fedrep_add():
    """Ditto's personal model trains as many epochs as the FedAvg update, FedRep's head
    --personal-head-epochs before its body's: a client's virtual time counts them."""
    def times(result):
        return [r.as_dict()["virtual_time_s"] for r in result.rounds]

    clock = dict(client_speeds="lognormal", client_eval_every=None)
    assert times(run(personalize="ditto:0.5", **clock)) == times(run(local_epochs=2, **clock))
    assert times(run(personalize="fedrep:last:1", personal_head_epochs=2, **clock)) == \
        times(run(local_epochs=3, **clock))
