"""Poisson sampling, dropouts, stragglers, SCAFFOLD's variates, non-finite updates and the
per-client summary."""

import math

import pytest
import torch

from mptrain.federated.availability import drops_out, local_steps
from mptrain.federated.client import full_steps, update_is_finite
from mptrain.federated.client_stats import summarize
from mptrain.federated.sampling import poisson_capacity, poisson_sample
from mptrain.federated.scaffold import (drift_correction, update_client_control_,
                                        update_server_control_)


def test_poisson_sampling_is_seeded_and_has_the_right_rate():
    first = poisson_sample(1000, 0.1, seed=1, round_index=4)
    assert first == poisson_sample(1000, 0.1, 1, 4) and first == sorted(set(first))
    sizes = [len(poisson_sample(1000, 0.1, 0, r)) for r in range(300)]
    assert sum(sizes) / 300 == pytest.approx(100, rel=0.03)
    assert len(set(sizes)) > 5                        # the count varies
    assert max(sizes) <= poisson_capacity(1000, 0.1) <= 1000
    assert poisson_sample(50, 0.0, 0, 0) == [] and poisson_sample(5, 1.0, 0, 0) == list(range(5))


def test_dropouts_are_seeded_and_at_the_rate():
    draws = [drops_out(0, r, c, 0.3) for r in range(50) for c in range(100)]
    assert sum(draws) / len(draws) == pytest.approx(0.3, abs=0.02)
    assert draws == [drops_out(0, r, c, 0.3) for r in range(50) for c in range(100)]
    assert not any(drops_out(0, r, 0, 0.0) for r in range(100))


def test_stragglers_take_fewer_steps_and_at_least_one():
    full = full_steps(samples=60, batch_size=10, local_epochs=2)
    assert full == 12 and full_steps(61, 10, 1) == 7
    steps = [local_steps(0, r, c, 0.5, full) for r in range(40) for c in range(50)]
    partial = [s for s in steps if s < full]
    assert len(partial) / len(steps) == pytest.approx(0.5, abs=0.04)
    assert min(partial) == 1 and max(partial) == full - 1
    assert set(range(1, full)) <= set(partial)        # every count below full occurs
    assert local_steps(0, 0, 0, 1.0, 1) == 1 and local_steps(0, 0, 0, 0.0, 9) == 9


def test_non_finite_updates_are_recognised():
    assert update_is_finite(torch.tensor([1.0, -2.0]))
    assert not update_is_finite(torch.tensor([1.0, math.nan]))
    assert not update_is_finite(torch.tensor([math.inf]))
    assert not update_is_finite(torch.tensor([math.inf, -math.inf]))   # sum NaN
    # Finite values whose sum overflows are finite: the sum alone would drop the client.
    assert update_is_finite(torch.tensor([3e38, 3e38]))


def test_scaffold_option_two_by_hand():
    c, c_i = torch.tensor([0.5, 0.0]), torch.tensor([0.1, 0.2])
    assert torch.allclose(drift_correction(c, c_i), torch.tensor([0.4, -0.2]))
    start, end = torch.tensor([1.0, 1.0]), torch.tensor([0.8, 1.1])
    delta = torch.empty(2)
    # c_i+ = c_i - c + (x - y) / (K lr) with K = 4, lr = 0.1: (0.2, -0.1) / 0.4 = (0.5, -0.25)
    update_client_control_(c_i, c, start, end, steps=4, lr=0.1, delta_out=delta)
    assert torch.allclose(c_i, torch.tensor([0.1, -0.05]))
    assert torch.allclose(delta, torch.tensor([0.0, -0.25]), atol=1e-6)
    update_server_control_(c, torch.tensor([2.0, -1.0]), clients=10)
    assert torch.allclose(c, torch.tensor([0.7, -0.1]))


def test_client_summary():
    # Accuracies 1.0, 0.5, (no samples), 0.75, 0.25 over 4, 2, 0, 4, 4 samples.
    samples = torch.tensor([4.0, 2.0, 0.0, 4.0, 4.0])
    correct = torch.tensor([4.0, 1.0, 0.0, 3.0, 1.0])
    stats = summarize(samples, correct, loss_sum=torch.tensor([1.0, 1.0, 0.0, 2.0, 3.0]))
    assert stats["clients_evaluated"] == 4
    assert stats["client_acc_mean"] == pytest.approx(0.625)
    assert stats["client_acc_weighted"] == pytest.approx(9 / 14)   # every sample once
    assert stats["client_loss"] == pytest.approx(7 / 14)
    assert stats["client_acc_std"] == pytest.approx(math.sqrt(0.078125))
    assert stats["client_acc_p10"] == pytest.approx(0.325)   # 0.25 + 0.3 * 0.25
    assert stats["client_acc_worst"] == 0.25
    empty = torch.tensor([])
    assert summarize(empty, empty, empty)["client_acc_mean"] is None
