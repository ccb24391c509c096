"""FedProx's systems heterogeneity as its paper runs it: stragglers' partial work weighed
by their data (FedProx), or thrown away (``drop_stragglers``: FedAvg); and the global
model's loss over the whole training set (``eval_train``), the training loss it plots."""

import copy
import json

import pytest
import torch
import torch.nn.functional as F

import mptrain
from mptrain.errors import UserError
from mptrain.strategies.fedavg import server as fedavg_server
from mptrain.strategies.fedavg.clients import ClientTrainer

from fedavg_workload import RUN, make_data, make_model, make_test_data


def fit(model, **options):
    return mptrain.fit(model, make_data(), make_test_data(),
                       **{**RUN, "workers": 1, "local_epochs": 2, **options})


def recorded_weights(monkeypatch, path):
    """Record every round's aggregation weights in ``path`` (the worker is forked: the
    patch travels with it, and the file carries what it saw back)."""
    original = fedavg_server.aggregate_rows

    def recording(rows, weights):
        with open(path, "a") as out:
            out.write(json.dumps(list(weights)) + "\n")
        return original(rows, weights)

    monkeypatch.setattr(fedavg_server, "aggregate_rows", recording)


@pytest.mark.timeout(120)
def test_a_stragglers_partial_work_weighs_as_much_as_its_data(monkeypatch, tmp_path):
    recorded_weights(monkeypatch, tmp_path / "weights.jsonl")
    fit(make_model(), rounds=1, start_method="fork")
    result = fit(make_model(), rounds=1, straggler_rate=1.0, start_method="fork")
    assert result.rounds[0].extras["partial"] == 4    # every client straggled
    full, straggling = (tmp_path / "weights.jsonl").read_text().splitlines()
    assert straggling == full == "[40.0, 40.0, 40.0, 40.0]"   # 20 samples x 2 epochs


@pytest.mark.timeout(120)
def test_dropping_stragglers_keeps_only_the_clients_that_finished():
    rows = [m.extras for m in fit(make_model(), rounds=4, straggler_rate=0.5,
                                  drop_stragglers=True).rounds]
    assert all(r["dropped"] == r["partial"] and r["reported"] + r["dropped"] == 4
               for r in rows)
    assert sum(r["dropped"] for r in rows) > 0


@pytest.mark.timeout(180)
@pytest.mark.parametrize("vectorize", ["off", "on"])
def test_dropped_stragglers_are_not_trained_and_the_model_is_the_same(monkeypatch, vectorize):
    initial = make_model()
    run = dict(rounds=3, straggler_rate=0.5, drop_stragglers=True, start_method="fork",
               vectorize_clients=vectorize)
    skipped = fit(copy.deepcopy(initial), **run)
    # What a dropped straggler cost before: trained, then thrown away.
    monkeypatch.setattr(ClientTrainer, "unheard", lambda self, client, round_index: False)
    trained = fit(copy.deepcopy(initial), **run)
    for name, tensor in skipped.model.state_dict().items():
        assert torch.equal(tensor, trained.model.state_dict()[name]), name
    for fast, slow in zip(skipped.rounds, trained.rounds):
        counts = ("reported", "dropped", "partial")
        assert [fast.extras[k] for k in counts] == [slow.extras[k] for k in counts]
        # only the clients that report are trained: 20 samples x 2 local epochs each
        assert fast.train_samples == 40 * fast.extras["reported"]
        assert slow.train_samples > fast.train_samples or not fast.extras["dropped"]
    assert sum(r.extras["dropped"] for r in skipped.rounds) > 0


@pytest.mark.timeout(120)
def test_under_a_robust_rule_a_dropped_straggler_still_trains_and_is_still_not_heard():
    # The rule's round (its counts, its skip) is as before the stragglers were skipped:
    # trained, then dropped after training (``AvailabilityConfig.client_turn``'s report).
    rows = fit(make_model(), rounds=1, straggler_rate=0.5, drop_stragglers=True,
               aggregator="median").rounds
    extras = rows[0].extras
    assert extras["dropped"] == extras["partial"] > 0
    assert extras["reported"] + extras["dropped"] == 4
    assert rows[0].train_samples > 40 * extras["reported"]   # the stragglers' part too


@pytest.mark.timeout(120)
def test_when_every_client_straggles_and_is_dropped_the_model_does_not_move():
    initial = make_model()
    result = fit(copy.deepcopy(initial), rounds=2, straggler_rate=1.0, drop_stragglers=True)
    for name, tensor in initial.state_dict().items():
        assert torch.equal(tensor, result.model.state_dict()[name]), name


def test_dropping_stragglers_without_any_is_a_one_line_refusal():
    with pytest.raises(UserError) as caught:
        fit(make_model(), drop_stragglers=True)
    assert "add straggler_rate P" in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.timeout(120)
def test_eval_train_scores_the_global_model_on_the_whole_training_set():
    result = fit(make_model(), rounds=2, workers=2, eval_train=True)
    last = result.rounds[-1].extras
    inputs, targets = make_data().tensors
    with torch.no_grad():
        output = result.model(inputs)
    assert last["train_eval_loss"] == pytest.approx(F.cross_entropy(output, targets).item(),
                                                    rel=1e-5)
    assert last["train_eval_accuracy"] == \
        pytest.approx((output.argmax(1) == targets).float().mean().item())
    assert "train_eval_loss" not in fit(make_model(), rounds=1).rounds[0].extras


def test_the_command_line_refuses_dropping_stragglers_without_any(capsys, tmp_path):
    from user_errors import fail

    err = fail(["run", "--strategy", "fedavg", "--data", "synthetic:0,0", "--drop-stragglers",
                "--out", str(tmp_path / "never")], capsys)
    assert "--drop-stragglers drops the clients that --straggler-rate P makes straggle" in err
    assert not (tmp_path / "never").exists()
