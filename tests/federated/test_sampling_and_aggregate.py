"""FedAvg's arithmetic, without processes: sampling, assignment, aggregation, server update,
FedProx, and the weighted-average collective."""

import pytest
import torch

from mptrain.comm.solo import SoloGroup
from mptrain.federated.aggregate import aggregate_rows, column_slice
from mptrain.federated.client import add_proximal_gradient_
from mptrain.federated.sampling import assign_clients, client_seed, mix_seed, sample_clients
from mptrain.federated.server_opt import ServerSGD


def server_update_(global_params, average, velocity, server_lr, server_momentum):
    """Today's FedAvg/FedAvgM server step through ``ServerSGD`` (its state: the velocity)."""
    state = {"velocity": velocity} if velocity is not None else {}
    ServerSGD(server_lr, server_momentum).step_(global_params, average, state)


def test_sampling_is_seeded_sorted_and_without_replacement():
    first = sample_clients(100, 10, seed=3, round_index=5)
    assert first == sample_clients(100, 10, seed=3, round_index=5)
    assert first == sorted(set(first)) and len(first) == 10
    assert all(0 <= c < 100 for c in first)
    assert first != sample_clients(100, 10, seed=3, round_index=6)
    assert first != sample_clients(100, 10, seed=4, round_index=5)


def test_full_participation_samples_every_client():
    assert sample_clients(7, 7, seed=0, round_index=0) == list(range(7))


def test_rounds_sample_clients_uniformly():
    counts = torch.zeros(20)
    for round_index in range(2000):
        counts[sample_clients(20, 5, 0, round_index)] += 1
    # Each client is expected 500 times; binomial sd ~19: 6 sd either way.
    assert counts.min() > 385 and counts.max() < 615, counts


def test_seeds_of_neighbouring_clients_and_rounds_differ():
    seeds = {client_seed(0, r, c) for r in range(20) for c in range(50)}
    assert len(seeds) == 1000
    assert mix_seed(1, 2) != mix_seed(2, 1)
    assert all(0 <= s < 2 ** 63 for s in seeds)


@pytest.mark.parametrize("world", [1, 2, 3, 5])
def test_assignment_covers_every_client_once_and_balances_samples(world):
    sizes = [60 + (7 * c) % 50 for c in range(40)]
    sampled = sample_clients(40, 12, 1, 0)
    shares = assign_clients(sampled, sizes, world)
    assert len(shares) == world
    assert sorted(c for share in shares for c in share) == sampled
    assert all(share == sorted(share) for share in shares)
    loads = [sum(sizes[c] for c in share) for share in shares]
    assert max(loads) - min(loads) <= max(sizes)  # greedy: within one client of even
    assert shares == assign_clients(sampled, sizes, world)


def test_more_workers_than_clients_leaves_some_idle():
    shares = assign_clients([3, 8], [10] * 10, 4)
    assert sorted(map(len, shares)) == [0, 0, 1, 1]


@pytest.mark.parametrize("numel, world", [(10, 3), (7, 7), (3, 5), (1000, 2)])
def test_column_slices_tile_the_vector(numel, world):
    covered = []
    for rank in range(world):
        part = column_slice(numel, world, rank)
        covered += list(range(numel))[part]
    assert covered == list(range(numel))


def test_aggregation_is_weighted_by_sample_counts_and_skips_failed_clients():
    rows = torch.tensor([[1.0, 10.0], [3.0, 30.0], [100.0, 100.0]])
    got = aggregate_rows(rows, [1.0, 3.0, 0.0])  # third client failed
    assert torch.allclose(got, torch.tensor([2.5, 25.0]))


def test_aggregation_sums_in_row_order_bitwise():
    rows = torch.randn(9, 50, generator=torch.Generator().manual_seed(0))
    weights = [float(w) for w in range(1, 10)]
    expected = torch.zeros(50, dtype=torch.float64)
    for row, weight in zip(rows, weights):
        expected.add_(row.double(), alpha=weight / sum(weights))
    assert torch.equal(aggregate_rows(rows, weights), expected.float())


def test_plain_fedavg_server_takes_the_average():
    global_params, average = torch.tensor([1.0, 2.0]), torch.tensor([0.3, 0.7])
    server_update_(global_params, average, None, server_lr=1.0, server_momentum=0.0)
    assert torch.equal(global_params, average)


def test_fedavgm_server_keeps_momentum():
    global_params = torch.tensor([1.0])
    velocity = torch.zeros(1)
    server_update_(global_params, torch.tensor([0.0]), velocity, 0.5, 0.9)
    assert torch.allclose(velocity, torch.tensor([1.0]))          # delta 1
    assert torch.allclose(global_params, torch.tensor([0.5]))     # 1 - 0.5 * 1
    server_update_(global_params, torch.tensor([0.0]), velocity, 0.5, 0.9)
    assert torch.allclose(velocity, torch.tensor([1.4]))          # 0.9 * 1 + 0.5
    assert torch.allclose(global_params, torch.tensor([-0.2]))    # 0.5 - 0.5 * 1.4


def test_server_learning_rate_scales_the_step():
    global_params = torch.tensor([2.0])
    server_update_(global_params, torch.tensor([0.0]), None, 0.25, 0.0)
    assert torch.allclose(global_params, torch.tensor([1.5]))


@pytest.mark.parametrize("scratch", [False, True])
def test_proximal_gradient_is_that_of_half_mu_squared_distance(scratch):
    param = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    anchor = torch.tensor([0.5, 0.0])
    loss = (param ** 2).sum()
    loss.backward()
    add_proximal_gradient_([param], [anchor], mu=0.1,
                           scratch=[torch.empty(2)] if scratch else None)
    expected = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    ((expected ** 2).sum() + 0.05 * ((expected - anchor) ** 2).sum()).backward()
    assert torch.allclose(param.grad, expected.grad)


def test_weighted_average_collective_with_one_rank():
    tensors = [torch.tensor([2.0, 4.0]), torch.tensor([6.0])]
    total = SoloGroup().weighted_average_(tensors, 3.0)
    assert total == 3.0
    assert torch.equal(tensors[0], torch.tensor([2.0, 4.0]))


def test_weighted_average_collective_with_zero_weight_leaves_tensors():
    tensors = [torch.tensor([2.0, 4.0])]
    assert SoloGroup().weighted_average_(tensors, 0.0) == 0.0
    assert torch.equal(tensors[0], torch.tensor([2.0, 4.0]))
