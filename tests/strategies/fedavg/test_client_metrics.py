"""Per-client evaluation (issue 50, item 7): natural clients are scored on their own test
split, pooled data on each client's training rows; client_metrics.jsonl holds a row per
client and evaluated round, the round's row and summary.json the weighted and unweighted
means and the 10th percentile; the same scores on one worker or two, one client at a time
or stacked, and under torchrun."""

from __future__ import annotations

import json

import pytest
import torch

import mptrain
from mptrain.models import build_model
from mptrain.strategies.fedavg.client_metrics import FILE_NAME, ClientMetricsFile

pytestmark = pytest.mark.timeout(180)


def rows_of(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_file_keeps_one_block_per_round_across_restarts_and_torn_lines(tmp_path):
    metrics = ClientMetricsFile(tmp_path)
    metrics.add(1, [{"round": 1, "client": 0}])
    metrics.add(2, [{"round": 2, "client": 0}, {"round": 2, "client": 1}])
    with open(tmp_path / FILE_NAME, "a") as handle:
        handle.write('{"round": 3, "cli')        # a crash in the middle of round 3
    again = ClientMetricsFile(tmp_path)           # a restart from round 1's checkpoint
    again.add(2, [{"round": 2, "client": 5}])
    assert rows_of(tmp_path / FILE_NAME) == [{"round": 1, "client": 0},
                                             {"round": 2, "client": 5}]
    again.add(2, [{"round": 2, "client": 6}])     # re-run within one attempt
    again.add(3, [{"round": 3, "client": 6}])
    assert [r["client"] for r in rows_of(tmp_path / FILE_NAME)] == [0, 6, 6]


def synthetic_fit(out=None, **options):
    bundle = mptrain.load_data("synthetic:1,1", clients=8, seed=0)
    model = build_model("mclr", bundle.input_shape, bundle.output_size)
    settings = dict(strategy="fedavg", workers=2, threads_per_worker=1, rounds=2,
                    local_epochs=1, clients_per_round=4, client_eval_every=1, seed=1)
    settings.update(options)
    return bundle, mptrain.fit(model, bundle, out=out, **settings)


def test_natural_clients_are_scored_on_their_own_test_split(tmp_path):
    bundle, result = synthetic_fit(out=tmp_path)
    rows = rows_of(tmp_path / FILE_NAME)
    assert [(r["round"], r["client"]) for r in rows] == \
        [(k, c) for k in (1, 2) for c in range(8)]
    assert [r["samples"] for r in rows[:8]] == bundle.clients.test_sizes().tolist()
    assert all(0 <= r["accuracy"] <= 1 and r["loss"] > 0 for r in rows)
    last = rows[8:]
    weighted = sum(r["accuracy"] * r["samples"] for r in last) / sum(r["samples"] for r in last)
    accuracies = torch.tensor([r["accuracy"] for r in last], dtype=torch.float64)
    summary = result.summary
    assert summary["client_eval_split"] == "test"
    assert summary["client_acc_weighted"] == pytest.approx(weighted)
    assert summary["client_acc_mean"] == pytest.approx(accuracies.mean().item())
    assert summary["client_acc_p10"] == pytest.approx(torch.quantile(accuracies, 0.1).item())
    assert result.rounds[-1].as_dict()["client_acc_weighted"] == summary["client_acc_weighted"]
    # The test rows are the clients' own: every test row is in exactly one client's split.
    assert sum(r["samples"] for r in last) == len(bundle.test)


def test_a_resumed_run_holds_each_evaluated_round_once(tmp_path):
    _, cut = synthetic_fit(out=tmp_path, rounds=2, checkpoint_every=1)
    before = rows_of(tmp_path / FILE_NAME)
    bundle = mptrain.load_data("synthetic:1,1", clients=8, seed=0)
    model = build_model("mclr", bundle.input_shape, bundle.output_size)
    mptrain.fit(model, bundle, out=tmp_path, resume=tmp_path, strategy="fedavg", workers=2,
                threads_per_worker=1, rounds=3, local_epochs=1, clients_per_round=4,
                client_eval_every=1, seed=1, checkpoint_every=1)
    rows = rows_of(tmp_path / FILE_NAME)
    assert [r["round"] for r in rows] == [1] * 8 + [2] * 8 + [3] * 8
    assert rows[:16] == before


def test_pooled_data_keeps_scoring_the_training_rows(tmp_path):
    bundle = mptrain.load_data("synthetic:0,0", seed=0)
    model = build_model("mclr", bundle.input_shape, bundle.output_size)
    result = mptrain.fit(model, bundle, out=tmp_path, strategy="fedavg", workers=2,
                         threads_per_worker=1, rounds=1, local_epochs=1, clients=6,
                         clients_per_round=2, partition="iid", client_eval_every=1)
    rows = rows_of(tmp_path / FILE_NAME)
    assert result.summary["client_eval_split"] == "train"
    assert sum(r["samples"] for r in rows) == len(bundle.train)
    assert all("name" not in r for r in rows)


def test_scores_are_the_same_on_one_worker_or_two_and_stacked():
    _, one = synthetic_fit(workers=1, vectorize_clients="off")
    _, two = synthetic_fit(workers=2, vectorize_clients="off")
    _, stacked = synthetic_fit(workers=2, vectorize_clients="on")
    keys = ("client_acc_mean", "client_acc_weighted", "client_acc_p10", "client_loss")
    assert {k: one.summary[k] for k in keys} == {k: two.summary[k] for k in keys}
    for key in keys:
        assert stacked.summary[key] == pytest.approx(one.summary[key], abs=0.02)


def test_leaf_users_are_named_in_the_rows(tmp_path):
    from leaf_files import synthetic_user, write_leaf

    write_leaf(tmp_path / "leaf", synthetic_user)
    bundle = mptrain.load_data(f"leaf:{tmp_path / 'leaf'}")
    model = build_model("mclr", bundle.input_shape, bundle.output_size)
    # One thread: a forked worker (two would come from the fork server, seconds a run).
    mptrain.fit(model, bundle, out=tmp_path / "out", strategy="fedavg", workers=1,
                threads_per_worker=1, rounds=1, local_epochs=1, clients_per_round=2,
                client_eval_every=1)
    rows = rows_of(tmp_path / "out" / FILE_NAME)
    assert [r["name"] for r in rows] == list(bundle.clients.names)
    assert all(r["samples"] == 2 for r in rows)   # each user's own 2 test samples


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_under_torchrun_every_ranks_clients_are_scored_as_with_own_workers(tmp_path,
                                                                           monkeypatch):
    """Each rank reports its clients' scores; rank 0 writes them all (no shared table).
    Without one the ranks sum their clients' means in another order: the losses agree to
    the last bits of float32, not bitwise."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "launch"))
    from test_torchrun import own_workers_run, torchrun

    args = ["run", "--strategy", "fedavg", "--data", "synthetic:1,1", "--clients", "8",
            "--rounds", "2", "--local-epochs", "1", "--clients-per-round", "4",
            "--client-eval-every", "1", "--seed", "1"]
    done = torchrun(tmp_path, args + ["--out", str(tmp_path / "torchrun")])
    assert done.returncode == 0, done.stderr
    assert own_workers_run(tmp_path, args + ["--workers", "2", "--quiet", "--out",
                                             str(tmp_path / "own")], monkeypatch) == 0
    ranks = rows_of(tmp_path / "torchrun" / FILE_NAME)
    assert [r["client"] for r in ranks] == list(range(8)) * 2
    own = rows_of(tmp_path / "own" / FILE_NAME)
    assert [(r["round"], r["client"], r["samples"], r["accuracy"]) for r in ranks] == \
        [(r["round"], r["client"], r["samples"], r["accuracy"]) for r in own]
    assert [r["loss"] for r in ranks] == pytest.approx([r["loss"] for r in own], rel=1e-5)
