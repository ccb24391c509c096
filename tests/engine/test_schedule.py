"""Learning-rate schedules: pure functions of (epoch, step), so a resumed run recomputes the
exact values of an uninterrupted one; and the epoch loop applies them before every step."""

import math

import pytest
import torch
import torch.nn as nn
from torch.utils.data import TensorDataset

import mptrain
from mptrain.engine.schedule import learning_rate
from mptrain.strategies import epochs

BASE, DECAY, STEPS = 0.1, 0.5, 8


def whole_run(name, epochs=4, steps=STEPS, base=BASE, decay=DECAY, start=0):
    return [[learning_rate(name, base, decay, epoch, step, steps) for step in range(steps)]
            for epoch in range(start, epochs)]


def test_step_is_constant_within_an_epoch_and_decays_by_the_factor_per_epoch():
    for epoch, rates in enumerate(whole_run("step")):
        assert rates == [BASE * DECAY ** epoch] * STEPS
    assert learning_rate("step", BASE, DECAY, 0, 0, STEPS) == BASE
    assert learning_rate("step", BASE, DECAY, 3, 5, STEPS) == pytest.approx(BASE / 8)


def test_cosine_starts_each_epoch_at_the_decayed_peak_and_anneals_towards_zero():
    for epoch, rates in enumerate(whole_run("cosine")):
        peak = BASE * DECAY ** epoch
        assert rates[0] == peak                                   # warm restart
        assert rates[STEPS // 2] == pytest.approx(peak / 2)       # half-way down the cosine
        assert rates[-1] == pytest.approx(peak * 0.5 * (1 + math.cos(math.pi * 7 / 8)))
        assert all(later < earlier for earlier, later in zip(rates, rates[1:])), rates
        assert rates[-1] > 0  # the last step of an epoch still learns
    # The boundary: the end of one epoch is below the next epoch's (decayed) peak.
    first, second = whole_run("cosine", epochs=2)
    assert first[-1] < second[0] == BASE * DECAY


@pytest.mark.parametrize("name", ["step", "cosine"])
def test_no_decay_repeats_the_same_epoch(name):
    rates = whole_run(name, decay=1.0)
    assert all(epoch == rates[0] for epoch in rates)
    assert rates[0][0] == BASE


@pytest.mark.parametrize("steps", [0, 1])
def test_cosine_with_at_most_one_step_per_epoch_uses_the_peak(steps):
    assert learning_rate("cosine", BASE, DECAY, 2, 0, steps) == BASE * DECAY ** 2


@pytest.mark.parametrize("name", ["step", "cosine"])
def test_a_resumed_run_recomputes_exactly_the_rates_of_an_uninterrupted_one(name):
    uninterrupted = whole_run(name, epochs=5)
    resumed = whole_run(name, epochs=5, start=2)
    assert resumed == uninterrupted[2:]  # bitwise: no hidden state, nothing to checkpoint
    # Any call order gives the same values (no state carried from call to call).
    backwards = [learning_rate(name, BASE, DECAY, epoch, step, STEPS)
                 for epoch in reversed(range(5)) for step in reversed(range(STEPS))]
    assert backwards == [rate for epoch in reversed(uninterrupted) for rate in reversed(epoch)]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", ["step", "cosine"])
def test_the_epoch_loop_sets_the_scheduled_rate_before_every_step(monkeypatch, name):
    """``single`` runs in this process, so the loop's calls can be watched here."""
    calls, applied = [], []
    original_step = torch.optim.SGD.step

    def recording_rate(*args):
        calls.append(args)
        return learning_rate(*args)

    def recording_step(self, *args, **kwargs):
        applied.append(self.param_groups[0]["lr"])
        return original_step(self, *args, **kwargs)

    monkeypatch.setattr(epochs, "learning_rate", recording_rate)
    monkeypatch.setattr(torch.optim.SGD, "step", recording_step)
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(40, 3, generator=generator)
    data = TensorDataset(inputs, inputs.sum(dim=1, keepdim=True))  # float targets: regression
    mptrain.fit(nn.Linear(3, 1), data, strategy="single", epochs=3, batch_size=16, lr=BASE,
                lr_decay=DECAY, lr_schedule=name, optimizer="sgd", threads_per_worker=1)

    steps = 3  # 40 samples in batches of 16: the last batch is short and still a step
    assert calls == [(name, BASE, DECAY, epoch, step, steps)
                     for epoch in range(3) for step in range(steps)]
    assert applied == [rate for epoch in whole_run(name, epochs=3, steps=steps)
                       for rate in epoch]
