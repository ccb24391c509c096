"""Shared small runs with every installed tracker, each read back by several tests.

W&B and MLflow read their settings from the environment: every test here runs with W&B
offline, its folders under a temporary directory, and no MLflow server."""

import sys

import pytest

import mptrain
from tracker_readers import installed_loggers
from tracker_runs import EPOCHS, RECIPE, StopAtRound, isolate, make_data, make_model


@pytest.fixture(autouse=True)
def isolated_environment(monkeypatch, tmp_path):
    isolate(monkeypatch, tmp_path / "home")


@pytest.fixture(scope="session")
def session_environment(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        isolate(patch, tmp_path_factory.mktemp("tracker-home"))
        yield patch
    release_wandb()


def release_wandb():
    """W&B's service process outlives its runs until teardown: other tests count this
    process's children."""
    if "wandb" in installed_loggers() and "wandb" in sys.modules:
        import wandb

        wandb.teardown()


@pytest.fixture(scope="session")
def supervised_run(tmp_path_factory, session_environment):
    """3 epochs of ``single`` with a checkpoint every epoch and every installed tracker."""
    out = tmp_path_factory.mktemp("supervised") / "run"
    train, test = make_data()
    result = mptrain.fit(make_model(), train, test, out=out, epochs=EPOCHS, checkpoint_every=1,
                         loggers=installed_loggers(), **RECIPE)
    return out, result


@pytest.fixture(scope="session")
def fedavg_run(tmp_path_factory, session_environment):
    out = tmp_path_factory.mktemp("fedavg") / "run"
    train, test = make_data()
    result = mptrain.fit(make_model(), train, test, out=out, strategy="fedavg", workers=2,
                         clients=4, clients_per_round=2, rounds=2, loggers=installed_loggers(),
                         **RECIPE)
    return out, result


@pytest.fixture(scope="session")
def rl_run(tmp_path_factory, session_environment):
    pytest.importorskip("gymnasium")
    from mptrain.rl import fit

    out = tmp_path_factory.mktemp("rl") / "run"
    result = fit("CartPole-v1", "a3c", out=out, workers=1, steps=400, round_steps=200,
                 eval_episodes=1, eval_every=1, seed=1, loggers=installed_loggers())
    return out, result


@pytest.fixture(scope="session")
def resumed_run(tmp_path_factory, session_environment):
    """4 epochs with a checkpoint every 2: the first run fails after round 3 was logged
    (its checkpoint is round 2's), and a resumed run redoes round 3 and does round 4."""
    out = tmp_path_factory.mktemp("resumed") / "run"
    train, test = make_data()
    with pytest.raises(RuntimeError, match="stopped at round 3"):
        mptrain.fit(make_model(), train, test, out=out, epochs=4, checkpoint_every=2,
                    loggers=installed_loggers(), callbacks=[StopAtRound(3)], **RECIPE)
    record = out / "trackers.json"   # written by the trackers that keep a run id
    first = record.read_text() if record.exists() else "{}"
    result = mptrain.fit(make_model(), train, test, resume=out, epochs=4,
                         loggers=installed_loggers(), quiet=True)
    return out, result, first


@pytest.fixture
def no_wandb_children():
    yield
    release_wandb()
