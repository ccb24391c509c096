"""The parent's recorder: metrics rows, metrics.jsonl, checkpoints offered, and a run that
diverges stopped before its round's checkpoint replaces a good one."""

import json
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn

from mptrain.checkpoint import CheckpointKeeper
from mptrain.cli import main
from mptrain.config import TrainConfig
from mptrain.engine.loop import RoundReport
from mptrain.engine.step import first_nonfinite
from mptrain.errors import TrainingDiverged
from mptrain.report.recorder import RunRecorder, parameters_finite


class Presenter:
    def __init__(self):
        self.lines = []

    def start_round(self, *args):
        pass

    def end_round(self, metrics, units, unit, parts=None):
        self.lines.append(metrics.epoch)

    def note(self, line):
        self.lines.append(line)


def report(index, rank, loss_sum, checkpoint=b"part", extras=None):
    return RoundReport(index=index, rank=rank, steps=2, train_samples=4,
                       train_loss_sum=loss_sum, train_started=0.0, train_ended=1.0,
                       eval_loss_sum=0.0, eval_correct=0, eval_count=0, minor_faults=0,
                       checkpoint=checkpoint, extras=extras or {})


class Keeper:
    def __init__(self, saved=None):
        self.offered = []
        self.saved_path, self.saved_epoch = saved or (None, None)

    def offer(self, done, reports, history):
        self.offered.append(done)


def recorder(tmp_path, keeper, model=None, extras=None):
    config = TrainConfig(epochs=3)
    strategy = SimpleNamespace(round_extras=lambda reports: dict(extras or {}),
                               round_line=lambda m: [],
                               round_notes=lambda m: [])
    return RunRecorder(config, strategy, "classification", Presenter(), keeper, tmp_path,
                       workers=2, samples_per_round=8, run_started=0.0, history=[],
                       model=model)


def test_a_round_is_recorded_once_every_rank_reported(tmp_path):
    keeper = Keeper()
    rec = recorder(tmp_path, keeper)
    rec.on_report(report(0, 0, 2.0))
    assert rec.history == [] and keeper.offered == []
    rec.on_report(report(0, 1, 2.0))
    assert [m.epoch for m in rec.history] == [1] and keeper.offered == [1]
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["epoch"] == 1 and rows[0]["train_loss"] == pytest.approx(0.5)


def test_a_nonfinite_loss_stops_the_run_and_keeps_the_good_checkpoint(tmp_path):
    keeper = Keeper(saved=(tmp_path / "checkpoint.pt", 1))
    rec = recorder(tmp_path, keeper)
    rec.on_report(report(0, 0, 1.0))
    rec.on_report(report(0, 1, 1.0))
    rec.on_report(report(1, 0, 1.0))
    with pytest.raises(TrainingDiverged) as stop:
        rec.on_report(report(1, 1, float("nan"), extras={"first_nonfinite_step": 4}))
    message = str(stop.value)
    assert "\n" not in message
    assert "epoch 2 (first at step 5 on rank 1)" in message
    assert f"last good checkpoint (epoch 1) is kept in {tmp_path / 'checkpoint.pt'}" in message
    assert keeper.offered == [1]   # round 2 never offered: its checkpoint is not written
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 2


def test_nonfinite_parameters_stop_the_run_too(tmp_path):
    model = nn.Linear(2, 1)
    rec = recorder(tmp_path, Keeper(), model=model)
    with torch.no_grad():
        model.bias.fill_(float("inf"))
    rec.on_report(report(0, 0, 1.0))
    with pytest.raises(TrainingDiverged, match="parameters became non-finite in epoch 1; "
                                               "stopped, no checkpoint was written"):
        rec.on_report(report(0, 1, 1.0))
    assert not parameters_finite(model)


def test_first_nonfinite_names_the_step():
    losses = [torch.tensor(1.0), torch.tensor(2.0), torch.tensor(float("inf")),
              torch.tensor(float("nan"))]
    assert first_nonfinite(losses) == 2
    assert first_nonfinite(losses[:2]) is None and first_nonfinite([]) is None


def test_a_resumed_run_that_diverges_keeps_the_checkpoint_it_resumed(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", "--epochs", "1", "--steps-per-epoch", "20", "--checkpoint-every", "1",
                 "--out", str(out), "--quiet"]) == 0
    good = (out / "checkpoint.pt").read_bytes()
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        main(["run", "--resume", str(out), "--epochs", "2", "--lr", "1e4", "--quiet"])
    assert stop.value.code == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("mptrain: error: training diverged: the training loss was nan "
                          "in epoch 2") and "\n" not in err
    assert f"(epoch 1) is kept in {out / 'checkpoint.pt'}" in err
    assert (out / "checkpoint.pt").read_bytes() == good


def test_the_keeper_of_a_resumed_run_names_the_checkpoint_it_resumed(tmp_path):
    (tmp_path / "checkpoint.pt").write_bytes(b"x")
    keeper = CheckpointKeeper(TrainConfig(checkpoint_every=1), {}, tmp_path,
                              SimpleNamespace(epoch=3))
    assert (keeper.saved_path, keeper.saved_epoch) == (tmp_path / "checkpoint.pt", 3)


def test_a_strategy_can_say_the_run_diverged(tmp_path):
    # fedavg: every client's update non-finite (its loss and the model stay finite, since
    # those clients are left out of both), said in the round's row.
    rec = recorder(tmp_path, Keeper(), extras={
        "diverged": "every client's update was non-finite in round 1 (4 clients)"})
    rec.on_report(report(0, 0, 1.0))
    with pytest.raises(TrainingDiverged, match=r"diverged: every client's update was "
                                               r"non-finite in round 1 \(4 clients\); "
                                               r"stopped, no checkpoint was written"):
        rec.on_report(report(0, 1, 1.0))
