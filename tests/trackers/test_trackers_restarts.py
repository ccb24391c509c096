"""Workers forked while the trackers are open, and again after a failure (--max-restarts):
no tracker thread is alive at the first fork, the run ends, and each tracker shows every
round (TensorBoard and CSV exactly once)."""

import multiprocessing
import os
import signal
import threading

import pytest
import torch.nn as nn

import mptrain
from run_watch import live_children
from tracker_readers import installed_loggers, tb_scalars, wandb_run
from tracker_runs import RECIPE, make_data
from forking import fork_or_skip

STEPS_PER_EPOCH = 4   # 128 samples / 2 workers / batch 16


class DiesOnceNet(nn.Module):
    """Worker 1 kills itself at its first step of epoch 4, once in the whole run."""

    def __init__(self, marker):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
        self.marker, self.steps = str(marker), 0

    def forward(self, x):
        if self.training and multiprocessing.current_process().name == "mptrain-worker-1":
            if self.steps == 3 * STEPS_PER_EPOCH and _first_claim(self.marker):
                os.kill(os.getpid(), signal.SIGKILL)
            self.steps += 1
        return self.body(x)


def _first_claim(path):
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False


@pytest.mark.timeout(120)
def test_a_restart_redoes_rounds_and_the_trackers_follow(tmp_path, monkeypatch):
    from mptrain.launch import supervisor

    before = {t.ident for t in threading.enumerate()}
    at_fork = []
    original = supervisor.Supervisor.run

    def watched(self, target, args):
        at_fork.append([t.name for t in threading.enumerate() if t.ident not in before])
        return original(self, target, args)

    monkeypatch.setattr(supervisor.Supervisor, "run", watched)
    marker, out = tmp_path / "killed", tmp_path / "run"
    train, test = make_data()
    # A checkpoint every 2 epochs: the restart goes back to epoch 2 and redoes epoch 3,
    # which every tracker had already been given.
    result = mptrain.fit(DiesOnceNet(marker), train, test, out=out, strategy="sync",
                         workers=2, epochs=4, checkpoint_every=2, max_restarts=1,
                         start_method=fork_or_skip(), loggers=installed_loggers(), **RECIPE)
    assert marker.exists() and result.restarts == 1
    # The trackers opened before the first fork, and none left a thread running (a child
    # inherits any lock such a thread holds). W&B's threads, started at the first round's
    # end, are alive at the restart's fork: the run ends all the same.
    assert len(at_fork) == 2 and at_fork[0] == []
    assert [row.epoch for row in result.epochs] == [1, 2, 3, 4]
    assert [line.split(",")[0] for line in
            (out / "metrics.csv").read_text().splitlines()[1:]] == ["1", "2", "3", "4"]
    if "tensorboard" in installed_loggers():
        assert [step for step, _ in tb_scalars(out / "tb")["train_loss"]] == [1, 2, 3, 4]
    if "wandb" in installed_loggers():
        found = wandb_run(out)
        assert sorted({row["epoch"] for row in found["history"] if "epoch" in row}) == \
            [1, 2, 3, 4]
        assert found["exit_codes"] == [0]
    if "mlflow" in installed_loggers():
        from tracker_readers import mlflow_history, mlflow_run

        client, run = mlflow_run(out)
        assert run.info.status == "FINISHED"
        steps = [s for s, _ in mlflow_history(client, run.info.run_id, "train_loss")]
        assert steps == [1, 2, 3, 3, 4]   # MLflow keeps both values of the redone round
    # Offline W&B starts no analytics threads (they would post to W&B's servers).
    assert not [t.name for t in threading.enumerate() if t.name.startswith("Otel")]
    assert live_children() == []
