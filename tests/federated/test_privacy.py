"""Clipping, noise, the private mean and adaptive clipping, by hand."""

import math

import pytest
import torch

from mptrain.federated.aggregate import column_slice, sum_rows
from mptrain.federated.privacy import (NOISE_BLOCK, clip_, count_noise, next_clip,
                                       noise_slice, private_mean, update_noise_multiplier)


def test_clipping_scales_long_updates_to_the_clip_and_leaves_short_ones():
    long = torch.tensor([3.0, 4.0])
    assert clip_(long, 1.0) == pytest.approx(5.0)
    assert torch.allclose(long, torch.tensor([0.6, 0.8]))
    short = torch.tensor([0.3, 0.4])
    assert clip_(short, 1.0) == pytest.approx(0.5)
    assert torch.equal(short, torch.tensor([0.3, 0.4]))


@pytest.mark.parametrize("world", [1, 2, 3, 7])
def test_noise_is_the_same_vector_whatever_the_slices(world):
    numel = 2 * NOISE_BLOCK + 123
    whole = noise_slice(numel, slice(0, numel), 1.0, seed=5, round_index=2)
    parts = [noise_slice(numel, column_slice(numel, world, r), 1.0, 5, 2) for r in range(world)]
    assert torch.equal(torch.cat(parts), whole)
    assert whole.std().item() == pytest.approx(1.0, abs=0.02)
    assert not torch.equal(whole, noise_slice(numel, slice(0, numel), 1.0, 5, 3))


def test_noise_std_is_z_times_clip():
    noise = noise_slice(200_000, slice(0, 200_000), 0.5 * 2.0, seed=0, round_index=0)
    assert noise.std().item() == pytest.approx(1.0, rel=0.01)


def test_private_mean_divides_the_noisy_sum_by_the_expected_count():
    rows = torch.tensor([[1.0, 0.0], [0.0, 1.0], [9.0, 9.0]])
    total = sum_rows(rows, [1.0, 1.0, 0.0])      # third client did not report
    assert torch.equal(total, torch.tensor([1.0, 1.0]))
    mean = private_mean(total, torch.tensor([0.5, -0.5]), expected_clients=4.0)
    assert torch.allclose(mean, torch.tensor([0.375, 0.125]))
    assert torch.equal(sum_rows(rows, [0.0, 0.0, 0.0]), torch.zeros(2))


def test_adaptive_clipping_moves_towards_the_quantile():
    # Every client within the clip, target median: the clip shrinks by exp(-lr * 0.5).
    assert next_clip(1.0, within=10, expected_clients=10, quantile=0.5, lr=0.2) == \
        pytest.approx(math.exp(-0.1))
    # None within: it grows by exp(lr * 0.5).
    assert next_clip(1.0, 0, 10, 0.5, 0.2) == pytest.approx(math.exp(0.1))
    assert next_clip(2.0, 5, 10, 0.5, 0.2) == pytest.approx(2.0)


def test_the_count_takes_part_of_the_noise_budget():
    # Andrew et al.: z_delta = (z^-2 - (2 sigma_b)^-2)^-1/2; z = 1, sigma_b = 5 -> 1.00504
    assert update_noise_multiplier(1.0, 5.0) == pytest.approx((1 - 0.01) ** -0.5)
    assert update_noise_multiplier(1.0, None) == 1.0
    with pytest.raises(ValueError):
        update_noise_multiplier(1.0, 0.4)
    assert count_noise(2.0, 0, 1) == count_noise(2.0, 0, 1) != count_noise(2.0, 0, 2)
