"""Weights & Biases: offline run files in --out/wandb (no network), read back record by
record with W&B's own protobuf messages."""

import pytest

from tracker_runs import EPOCHS, scalar_rows
from tracker_readers import wandb_run, wandb_run_files

pytest.importorskip("wandb")


def assert_rounds_match(found, out):
    by_round = {}
    for row in found["history"]:
        by_round.setdefault(row["epoch"], {}).update(row)
    for round_, numbers in scalar_rows(out).items():
        for key, value in numbers.items():
            assert by_round[round_][key] == pytest.approx(value, rel=1e-9), (key, round_)


def test_supervised_run_offline_files(supervised_run):
    out, result = supervised_run
    [_] = wandb_run_files(out)
    found = wandb_run(out)
    assert found["config"]["strategy"] == "single" and found["config"]["epochs"] == EPOCHS
    assert_rounds_match(found, out)
    assert found["summary"]["test_accuracy"] == pytest.approx(result.test_accuracy)
    assert found["exit_codes"] == [0]
    assert "model" in found["artifacts"]
    assert list((out / "wandb").glob("offline-run-*/files/media/images/curves_*.png"))


def test_fedavg_run(fedavg_run):
    out, _ = fedavg_run
    found = wandb_run(out)
    assert found["config"]["strategy"] == "fedavg"
    assert_rounds_match(found, out)


def test_rl_run(rl_run):
    out, _ = rl_run
    found = wandb_run(out)
    assert found["config"]["algo"] == "a3c"
    assert_rounds_match(found, out)


def test_a_resumed_run_continues_the_same_wandb_run(resumed_run):
    out, _, first = resumed_run
    import json

    found = wandb_run(out)
    assert len(wandb_run_files(out)) == 2            # one file per attempt, offline
    assert set(found["ids"]) == {json.loads(first)["wandb"]["run_id"]}
    assert found["exit_codes"] == [1, 0]             # the failed attempt, then the resumed
    assert_rounds_match(found, out)                  # the redone round 3 comes last
