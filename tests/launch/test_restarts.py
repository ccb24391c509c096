"""Restarts: the policy (``run_with_restarts``) driven by scripted attempts, and real sync and
ddp runs whose worker is SIGKILLed once and that still end bitwise equal to an uninterrupted
run (restarted from the last checkpoint kept in memory, or from the initial model)."""

import multiprocessing
import os
import signal
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from torch.utils.data import TensorDataset

import mptrain
from mptrain.errors import Interrupted, RunInterrupted, WorkerFailedError
from mptrain.launch.restarts import run_with_restarts
from run_watch import live_children

# -- the policy, with scripted attempts ---------------------------------------------------


class ScriptedAttempts:
    """Each call plays the next outcome: None returns, an exception is raised."""

    def __init__(self, *outcomes):
        self.outcomes = list(outcomes)
        self.calls = 0
        self.restarts = []

    def attempt(self):
        outcome = self.outcomes[self.calls]
        self.calls += 1
        if outcome is not None:
            raise outcome

    def on_restart(self, failure, restarts):
        self.restarts.append((str(failure), restarts))


def failure(n):
    return WorkerFailedError(f"training failed: worker rank 1 failed ({n})")


def describe_stop(signum):
    return f"stopped by {signal.Signals(signum).name}"


def test_an_attempt_that_succeeds_is_not_restarted():
    script = ScriptedAttempts(None)
    assert run_with_restarts(script.attempt, 3, script.on_restart, describe_stop) == 0
    assert script.calls == 1 and script.restarts == []


def test_failed_attempts_are_restarted_up_to_the_limit_then_succeed():
    script = ScriptedAttempts(failure(1), failure(2), None)
    assert run_with_restarts(script.attempt, 2, script.on_restart, describe_stop) == 2
    assert script.calls == 3
    assert script.restarts == [(str(failure(1)), 1), (str(failure(2)), 2)]


@pytest.mark.parametrize("max_restarts", [0, 1, 2])
def test_the_failure_past_the_limit_is_raised(max_restarts):
    script = ScriptedAttempts(*(failure(n) for n in range(max_restarts + 1)), None)
    with pytest.raises(WorkerFailedError) as caught:
        run_with_restarts(script.attempt, max_restarts, script.on_restart, describe_stop)
    assert str(caught.value) == str(failure(max_restarts))
    assert script.calls == max_restarts + 1 and len(script.restarts) == max_restarts


@pytest.mark.parametrize("stop, signum", [
    (KeyboardInterrupt(), signal.SIGINT),
    (Interrupted(signal.SIGTERM), signal.SIGTERM),
], ids=["ctrl-c", "sigterm"])
@pytest.mark.parametrize("after_a_failure", [False, True])
def test_a_signal_stops_instead_of_restarting(stop, signum, after_a_failure):
    outcomes = ([failure(1)] if after_a_failure else []) + [stop, None]
    script = ScriptedAttempts(*outcomes)
    with pytest.raises(RunInterrupted) as caught:
        run_with_restarts(script.attempt, 5, script.on_restart, describe_stop)
    assert caught.value.exit_code == 128 + signum
    assert str(caught.value) == describe_stop(signum)
    assert script.calls == len(outcomes) - 1  # never tried again after the signal


@pytest.mark.parametrize("stop", [KeyboardInterrupt(), Interrupted(signal.SIGTERM)],
                         ids=["ctrl-c", "sigterm"])
def test_a_stopped_run_is_not_swallowed_by_except_exception(stop):
    # A sweep written `for lr in lrs: try: fit(...) except Exception: log(...)` went on to
    # the next fit() after Ctrl-C: the stop was an Exception. It is a KeyboardInterrupt,
    # as the Ctrl-C it comes from.
    script = ScriptedAttempts(stop, None)
    with pytest.raises(KeyboardInterrupt) as caught:
        try:
            run_with_restarts(script.attempt, 0, script.on_restart, describe_stop)
        except Exception:   # noqa: BLE001 -- the user's sweep
            pytest.fail("the stop was swallowed by except Exception")
    assert isinstance(caught.value, RunInterrupted)


# -- real runs: a worker SIGKILLed once ---------------------------------------------------

SAMPLES, BATCH, WORKERS, EPOCHS = 128, 16, 2, 3
STEPS_PER_EPOCH = SAMPLES // WORKERS // BATCH  # 4 per worker


class DiesOnceNet(nn.Module):
    """SIGKILLs worker rank 1 at its ``kill_at_step``-th forward, once per marker file: the
    restarted workers (forked from the parent, counting from 0 again) find the marker and
    live. The parent's own forward calls (fit's shape check) never count."""

    def __init__(self, marker: Path | None = None, kill_at_step: int = 0):
        super().__init__()
        torch.manual_seed(0)
        self.hidden = nn.Linear(6, 12)
        self.drop = nn.Dropout(0.2)  # draws from the RNG: its state must be restored too
        self.out = nn.Linear(12, 3)
        self.marker = str(marker) if marker else None
        self.kill_at_step = kill_at_step
        self.steps = 0

    def forward(self, x):
        if self.marker and self.training and \
                multiprocessing.current_process().name == "mptrain-worker-1":
            if self.steps == self.kill_at_step and _first_claim(self.marker):
                os.kill(os.getpid(), signal.SIGKILL)
            self.steps += 1
        return self.out(self.drop(torch.tanh(self.hidden(x))))


def _first_claim(path: str) -> bool:
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False


def make_data():
    generator = torch.Generator().manual_seed(5)
    inputs = torch.randn(SAMPLES, 6, generator=generator)
    targets = (inputs @ torch.randn(6, 3, generator=generator)).argmax(dim=1)
    return TensorDataset(inputs, targets), TensorDataset(inputs[:32], targets[:32])


def run(strategy, model, **options):
    train, test = make_data()
    return mptrain.fit(model, train, test, strategy=strategy, workers=WORKERS, epochs=EPOCHS,
                       batch_size=BATCH, lr=0.05, optimizer="adam", lr_schedule="cosine",
                       seed=2, threads_per_worker=1, **options)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("strategy, kill_at_step", [
    ("sync", STEPS_PER_EPOCH + 1),   # in epoch 2: restarted from the checkpoint of epoch 1
    ("ddp", STEPS_PER_EPOCH + 1),
    ("sync", 1),                     # in epoch 1: restarted from the initial model
    ("ddp", 2 * STEPS_PER_EPOCH),    # the first step of the last epoch
], ids=["sync-epoch2", "ddp-epoch2", "sync-epoch1", "ddp-epoch3"])
def test_a_worker_killed_once_is_restarted_and_the_run_ends_as_if_it_never_died(
        tmp_path, strategy, kill_at_step):
    marker = tmp_path / "killed-once"
    restarted = run(strategy, DiesOnceNet(marker, kill_at_step), max_restarts=1)
    straight = run(strategy, DiesOnceNet())

    assert marker.exists(), "the worker was never killed: the test tested nothing"
    assert restarted.restarts == 1 and restarted.summary["restarts"] == 1
    assert [e.epoch for e in restarted.epochs] == [1, 2, 3]  # each epoch reported once
    a, b = restarted.model.state_dict(), straight.model.state_dict()
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    assert [e.train_loss for e in restarted.epochs] == [e.train_loss for e in straight.epochs]
    assert live_children() == []


@pytest.mark.timeout(120)
def test_without_restarts_the_same_death_fails_the_run(tmp_path):
    marker = tmp_path / "killed-once"
    with pytest.raises(WorkerFailedError) as caught:
        run("sync", DiesOnceNet(marker, STEPS_PER_EPOCH + 1))
    [failure_] = caught.value.failures
    assert (failure_.rank, failure_.signal_name) == (1, "SIGKILL")
    assert live_children() == []
