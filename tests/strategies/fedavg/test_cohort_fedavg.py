"""Real fedavg runs with --vectorize-clients: stacked and one at a time give the same model
to float rounding for every client algorithm, stacked runs are bitwise reproducible, resume
bitwise and do not depend on --workers; what cannot vectorize is refused (on) or falls
back (auto) in one line."""

import copy
import json
import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import mptrain
from mptrain.errors import UserError

from fedavg_workload import RUN, make_data, make_model, make_test_data  # noqa: E402

#: A round's updates agree to ~1e-7 (``test_cohort``); three rounds of averaging keep the
#: models within this.
ATOL = 1e-5


def fit(model, workers=2, **options):
    return mptrain.fit(model, make_data(), make_test_data(),
                       **{**RUN, "workers": workers, "clients_per_round": 6, **options})


def state_of(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def assert_models_close(one, other, atol=ATOL):
    mine, theirs = state_of(one), state_of(other)
    for name, tensor in mine.items():
        torch.testing.assert_close(tensor, theirs[name], atol=atol, rtol=0, msg=name)


ALGORITHMS = {
    "momentum, weight decay, unreliable clients": dict(
        momentum=0.9, weight_decay=1e-3, straggler_rate=0.5, dropout_rate=0.2, lr=0.05),
    "adam and fedprox": dict(optimizer="adam", lr=0.01, prox_mu=0.3),
    "scaffold": dict(scaffold=True, lr=0.1),
    "dp-fedavg": dict(sampling="poisson", client_fraction=0.5, clients_per_round=None,
                      dp_clip=0.5, dp_noise=0.3, target_epsilon=None),
}


@pytest.mark.timeout(180)
@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_stacked_and_one_at_a_time_agree(name):
    initial = make_model()
    options = {"client_eval_every": 1, **ALGORITHMS[name]}
    off = fit(copy.deepcopy(initial), vectorize_clients="off", **options)
    on = fit(copy.deepcopy(initial), vectorize_clients="on", **options)
    assert on.summary["client_path"].startswith("vectorized")   # x6, or Poisson's bound
    assert off.summary["client_path"] == "one client at a time: vectorize_clients off"
    assert_models_close(on.model, off.model)
    assert not torch.allclose(on.model[0].weight, initial[0].weight)   # it trained
    assert on.summary["test_accuracy"] == pytest.approx(off.summary["test_accuracy"],
                                                         abs=1 / 60 + 1e-9)
    for stacked, alone in zip(on.rounds, off.rounds):
        a, b = stacked.as_dict(), alone.as_dict()
        assert (a["reported"], a["dropped"], a["partial"], a["failed_clients"]) == \
            (b["reported"], b["dropped"], b["partial"], b["failed_clients"])
        assert a["client_acc_mean"] == pytest.approx(b["client_acc_mean"], abs=0.02)


@pytest.mark.timeout(180)
def test_stacked_runs_are_bitwise_reproducible_and_independent_of_workers():
    initial = make_model()
    one = fit(copy.deepcopy(initial), workers=1, vectorize_clients="on")
    again = fit(copy.deepcopy(initial), workers=1, vectorize_clients="on")
    two = fit(copy.deepcopy(initial), workers=2, vectorize_clients="on", vectorize_chunk=2)
    for name, tensor in state_of(one.model).items():
        assert torch.equal(tensor, state_of(again.model)[name]), name
        assert torch.equal(tensor, state_of(two.model)[name]), name
    assert two.summary["client_path"] == "vectorized x2"


@pytest.mark.timeout(180)
def test_a_stacked_run_resumes_bitwise(tmp_path):
    initial = make_model()
    options = dict(vectorize_clients="on", momentum=0.5, server_momentum=0.5)
    whole = fit(copy.deepcopy(initial), rounds=4, **options)
    fit(copy.deepcopy(initial), rounds=2, out=tmp_path, checkpoint_every=1, **options)
    resumed = fit(copy.deepcopy(initial), rounds=4, resume=tmp_path, out=tmp_path, **options)
    assert len(resumed.rounds) == 4
    for name, tensor in state_of(whole.model).items():
        assert torch.equal(tensor, state_of(resumed.model)[name]), name


def norm_model():
    torch.manual_seed(7)
    return nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.Tanh(), nn.Linear(16, 3))


@pytest.mark.timeout(120)
def test_on_refuses_what_cannot_vectorize_and_auto_falls_back():
    with pytest.raises(UserError) as refused:
        fit(norm_model(), vectorize_clients="on")
    message = str(refused.value)
    assert message.startswith("vectorize_clients on: module '1' (BatchNorm1d)")
    assert "\n" not in message
    fallback = fit(norm_model(), vectorize_clients="auto", rounds=1)
    assert fallback.summary["client_path"].startswith(
        "one client at a time: module '1' (BatchNorm1d) normalises with batch statistics")


@pytest.mark.timeout(120)
def test_auto_keeps_small_cohorts_on_a_cpu_one_at_a_time():
    result = fit(make_model(), rounds=1)     # 6 clients over 2 workers: 3 each
    assert result.summary["vectorize_clients"] == "auto"
    assert result.summary["client_path"].startswith(
        "one client at a time: 3 client(s) per worker per round")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("options, path", [
    (dict(vectorize_chunk=1000), "vectorized x6"),       # 6 clients a round
    (dict(vectorize_chunk=1000, sampling="poisson", client_fraction=0.5,
          clients_per_round=None),                       # Poisson: at most every client
     "vectorized, cohorts of up to 12 (Poisson: 6 clients expected per round)"),
    (dict(vectorize_chunk=4), "vectorized x4"),
])
def test_a_forced_cohort_size_says_what_a_cohort_can_hold(options, path):
    """``--vectorize-chunk`` above what a round can sample is no cohort that size: the
    banner and the summary say the most a cohort holds, as the size from memory does."""
    result = fit(make_model(), workers=1, rounds=1, vectorize_clients="on", **options)
    assert result.summary["client_path"] == path


@pytest.mark.parametrize("options, needle", [
    (dict(vectorize_clients="sometimes"), "vectorize_clients"),
    (dict(vectorize_chunk=0), "vectorize_chunk must be a positive integer"),
    (dict(vectorize_chunk=4, vectorize_clients="off"), "vectorize_clients off trains none"),
])
def test_bad_vectorize_settings_are_one_line_user_errors(options, needle):
    with pytest.raises(UserError) as caught:
        fit(make_model(), **options)
    assert needle in str(caught.value) and "\n" not in str(caught.value)


def test_other_strategies_refuse_vectorize_clients():
    with pytest.raises(UserError) as caught:
        mptrain.fit(make_model(), make_data(), strategy="sync", workers=2,
                    vectorize_clients="on", quiet=True)
    assert "vectorize_clients" in str(caught.value) and "fedavg" in str(caught.value)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_stacked_clients_under_torchrun_train_like_own_workers(tmp_path, monkeypatch):
    """Two ranks from torchrun agree on the cohort size through their group (gloo) and
    train a regression task stacked, as mptrain's own two workers do."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "launch"))
    from test_torchrun import own_workers_run, torchrun

    args = ["run", "--data", "linreg", "--strategy", "fedavg", "--rounds", "2",
            "--clients", "20", "--clients-per-round", "8", "--vectorize-clients", "on",
            "--quiet"]
    out, own = tmp_path / "torchrun", tmp_path / "own"
    done = torchrun(tmp_path, args + ["--out", str(out)])
    assert done.returncode == 0, done.stderr
    assert own_workers_run(tmp_path, args + ["--workers", "2", "--out", str(own)],
                           monkeypatch) == 0
    for where in (out, own):
        summary = json.loads((where / "summary.json").read_text())
        assert summary["client_path"] == "vectorized x8"
    theirs, ours = torch.load(out / "model.pt"), torch.load(own / "model.pt")
    for key in ours:
        assert torch.allclose(theirs[key], ours[key], rtol=0, atol=1e-5), key


@pytest.mark.timeout(120)
def test_the_command_line_and_a_config_file_set_the_path(tmp_path, monkeypatch):
    from mptrain.cli import main

    config = tmp_path / "run.toml"
    config.write_text('strategy = "fedavg"\nvectorize-clients = "on"\nmodel = "mlp"\n'
                      'rounds = 1\nclients = 12\nclients-per-round = 6\nworkers = 1\n'
                      'threads-per-worker = 1\n')   # a forked worker, not the fork server's
    monkeypatch.chdir(tmp_path)
    try:
        code = main(["run", "--config", str(config), "--vectorize-chunk", "3", "--quiet",
                     "--out", str(tmp_path / "out")])
    except SystemExit as exit_:
        code = exit_.code
    assert code in (0, None)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["client_path"] == "vectorized x3"
    assert summary["vectorize_clients"] == "on"


@pytest.mark.timeout(120)
def test_a_cohort_that_raises_is_retrained_one_client_at_a_time(monkeypatch):
    """Its clients then train exactly as with off: a failing client is named (or dropped
    alone with --accept-failures) by the one-at-a-time path, not lost with its cohort."""
    from mptrain.strategies.fedavg.cohorts import CohortClients

    def out_of_memory(self, clients, round_index):
        raise RuntimeError("CUDA out of memory (simulated)")

    monkeypatch.setattr(CohortClients, "train", out_of_memory)   # forked workers inherit it
    initial = make_model()
    retried = fit(copy.deepcopy(initial), vectorize_clients="on", start_method="fork")
    off = fit(copy.deepcopy(initial), vectorize_clients="off", start_method="fork")
    for name, tensor in state_of(off.model).items():
        assert torch.equal(tensor, state_of(retried.model)[name]), name
    # and the run says so, round by round: its summary's path is not what trained them
    for row in (m.as_dict() for m in retried.rounds):
        assert row["unstacked_clients"] == 6
        assert row["unstacked_reason"] == "RuntimeError: CUDA out of memory (simulated)"
    assert all("unstacked_clients" not in m.as_dict() for m in off.rounds)


def test_a_round_whose_cohort_raised_says_so_in_one_note():
    from types import SimpleNamespace

    from mptrain.config import TrainConfig
    from mptrain.strategies.fedavg.report import DivergenceWatch, round_notes, round_row

    def report(extras):
        return SimpleNamespace(index=2, extras={"clients": 3, "reported": 3, **extras},
                               evaluated_at=1.0, train_started=0.0)

    reports = [report({"unstacked_clients": 3, "unstacked_reason": "RuntimeError: oom"}),
               report({"unstacked_clients": 2, "unstacked_reason": "RuntimeError: oom"}),
               report({})]
    row = round_row(reports, DivergenceWatch())
    assert row["unstacked_clients"] == 5 and row["unstacked_reason"] == "RuntimeError: oom"
    notes = round_notes(TrainConfig(strategy="fedavg"), SimpleNamespace(extras=row, epoch=3))
    assert notes == ["round 3: stacked training raised (RuntimeError: oom); 5 client(s) "
                     "trained one at a time instead"]


class InFloat64(nn.Module):
    """Takes the float32 batches into a float64 model, scaled so that a poisoned sample
    moves its client's weights past float32's range (finite in float64)."""

    def forward(self, x):
        return x.double() * 1e12


@pytest.mark.timeout(120)
def test_a_float64_client_beyond_float32s_range_is_dropped_from_the_float32_table():
    """A float64 model's stacked client can be finite as trained (the cohort's verdict) and
    infinite once written into the round's float32 table: it is dropped and counted as
    non-finite, as the one-at-a-time path drops it, and the global model stays finite."""
    from mptrain.data.partitions import partition_clients

    parts = partition_clients("iid", make_data().tensors[1], RUN["clients"], RUN["seed"])
    poisoned = int(parts[5][0])
    torch.manual_seed(7)
    model = nn.Sequential(InFloat64(), nn.Linear(6, 3).double())
    for mode, path in (("on", "vectorized x12"), ("off", "one client at a time")):
        result = mptrain.fit(copy.deepcopy(model), make_data(poisoned, poison=1e30),
                             make_test_data(), **{**RUN, "workers": 1, "rounds": 2,
                                                  "clients_per_round": 12,
                                                  "vectorize_clients": mode})
        rows = [m.as_dict() for m in result.rounds]
        assert [r.get("nonfinite_clients") for r in rows] == [[5], [5]], mode
        assert [r["reported"] for r in rows] == [11, 11], mode
        assert all(torch.isfinite(t).all() for t in state_of(result.model).values()), mode
        assert result.summary["client_path"].startswith(path)


@pytest.mark.parametrize("planned, trained, note", [
    ("vectorized", "vectorized x37", "clients: vectorized x37"),       # sized on the GPU
    ("vectorized x10", "vectorized x8", "clients: vectorized x8"),     # a resumed run's size
    ("vectorized x10", "vectorized x10", None),                        # as the banner said
])
def test_the_first_round_says_the_path_when_the_banner_could_not(planned, trained, note):
    from types import SimpleNamespace

    from mptrain.config import TrainConfig
    from mptrain.strategies.fedavg.report import round_notes

    extras = {"client_path": trained, "clients": 4, "reported": 4}
    notes = round_notes(TrainConfig(strategy="fedavg"), SimpleNamespace(extras=extras, epoch=1),
                        planned=planned)
    assert notes == ([note] if note else [])
