"""Tests for mptrain.comm.reduce: the averaging math, without processes."""

import pytest
import torch

from mptrain.comm.reduce import mean_of_rows, weighted_average


def random_slots(world, numel, dtype=torch.float32, seed=0, mixed=False):
    generator = torch.Generator().manual_seed(seed)
    values = torch.randn(world, numel, generator=generator, dtype=torch.float64)
    if mixed:
        # Mixed magnitudes, so that another summation order would round differently.
        values *= 10.0 ** torch.randint(-6, 6, (world, numel), generator=generator)
    return values.to(dtype)


@pytest.mark.parametrize("world", [1, 2, 3, 8, 64])
@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-5), (torch.float64, 1e-12),
                                              (torch.float16, 1e-3), (torch.bfloat16, 8e-3)])
def test_mean_of_rows_is_the_mean(world, dtype, tolerance):
    slots = random_slots(world, 1000, dtype)
    out = torch.empty(1000, dtype=dtype)
    result = mean_of_rows(slots, out)
    assert result is out
    # Half precision is summed in float32 and rounded once: within a few units of the last
    # place of the exact mean, however many ranks.
    expected = slots.to(torch.float64).mean(0)
    torch.testing.assert_close(out.to(torch.float64), expected, rtol=tolerance,
                               atol=tolerance)


@pytest.mark.parametrize("world", [2, 5, 64])
def test_mean_of_rows_is_close_to_the_exact_mean_with_mixed_magnitudes(world):
    # Summed in float32 by a kernel whose order is its own: the error must stay that of a
    # float32 sum of `world` terms, not grow with cancellation between ranks.
    slots = random_slots(world, 1000, mixed=True)
    exact = slots.to(torch.float64).sum(0) / world
    error = (mean_of_rows(slots, torch.empty(1000)).to(torch.float64) - exact).abs()
    bound = world * 2.0 ** -24 * slots.to(torch.float64).abs().sum(0) / world
    assert torch.all(error <= bound)


def test_mean_of_rows_of_two_ranks_is_their_exact_float_mean():
    # (a + b) / 2 rounds once per operation whatever the order: two ranks give the same
    # bits as the textbook average, which the 1-vs-2-worker tests rely on.
    slots = random_slots(2, 1000, mixed=True)
    assert torch.equal(mean_of_rows(slots, torch.empty(1000)), (slots[0] + slots[1]) / 2)


def test_mean_of_rows_is_bitwise_repeatable():
    slots = random_slots(7, 4096, mixed=True)
    first = mean_of_rows(slots, torch.empty(4096)).clone()
    second = mean_of_rows(slots, torch.empty(4096))
    assert torch.equal(first, second)
    assert first.view(torch.int32).tolist() == second.view(torch.int32).tolist()


def test_mean_of_rows_does_not_change_the_slots():
    slots = random_slots(3, 10)
    before = slots.clone()
    mean_of_rows(slots, torch.empty(10))
    assert torch.equal(slots, before)


def test_mean_of_rows_overwrites_out():
    slots = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    out = torch.full((2,), 100.0)
    assert mean_of_rows(slots, out).tolist() == [2.0, 3.0]


def test_weighted_average_with_equal_weights_is_the_mean():
    tensors = list(random_slots(4, 50))
    result = weighted_average(tensors, [3, 3, 3, 3])
    torch.testing.assert_close(result, torch.stack(tensors).mean(0))
    assert result.dtype == torch.float32


@pytest.mark.parametrize("weights", [[1, 3], [10, 30], [0.25, 0.75]])
def test_weighted_average_is_proportional(weights):
    a, b = torch.tensor([0.0, 4.0, -8.0]), torch.tensor([4.0, 0.0, 8.0])
    torch.testing.assert_close(weighted_average([a, b], weights), torch.tensor([3.0, 1.0, 4.0]))


def test_weighted_average_zero_weight_ignores_a_tensor():
    a, b = torch.tensor([1.0, 2.0]), torch.tensor([1e6, -1e6])
    assert torch.equal(weighted_average([a, b], [5, 0]), a)


def test_weighted_average_keeps_dtype_and_shape():
    tensors = [torch.ones(2, 3, dtype=torch.float16), torch.zeros(2, 3, dtype=torch.float16)]
    result = weighted_average(tensors, [1, 1])
    assert result.dtype == torch.float16 and result.shape == (2, 3)
    assert torch.all(result == 0.5)


def test_weighted_average_does_not_change_inputs():
    tensors = [torch.tensor([1.0]), torch.tensor([2.0])]
    weighted_average(tensors, [1, 2])
    assert [t.item() for t in tensors] == [1.0, 2.0]


@pytest.mark.parametrize("weights", [[0, 0], [0.0, 0.0], [1, -1], [-1, -2]])
def test_weighted_average_needs_a_positive_total(weights):
    with pytest.raises(ValueError, match="positive"):
        weighted_average([torch.ones(2), torch.ones(2)], weights)


@pytest.mark.parametrize("count, weights", [(2, [1]), (1, [1, 2]), (0, [])])
def test_weighted_average_needs_one_weight_per_tensor(count, weights):
    with pytest.raises(ValueError, match="one weight per tensor"):
        weighted_average([torch.ones(2)] * count, weights)
