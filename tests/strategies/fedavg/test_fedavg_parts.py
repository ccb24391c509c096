"""fedavg's parts without processes: the server's combination of a round's client updates
(the seam robust aggregation plugs into), the shared state as one picklable value, and the
parent's cut of the clients."""

import dataclasses
import pickle
from types import SimpleNamespace

import pytest
import torch

from mptrain.config import TrainConfig
from mptrain.strategies.fedavg.server import combine_updates
from mptrain.strategies.fedavg.shared import FedAvgShared, cut_clients


def test_combine_updates_is_the_weighted_mean_of_the_reporting_clients():
    rows = torch.tensor([[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]])
    params = torch.zeros(2)
    combined = combine_updates(rows, [1.0, 3.0, 0.0], params, clip=None)
    assert torch.equal(combined, torch.tensor([2.5, 3.5]))


def test_combine_updates_says_none_when_no_client_reported():
    rows = torch.ones(2, 3)
    assert combine_updates(rows, [0.0, 0.0], torch.zeros(3), clip=None) is None


def test_clipped_updates_are_added_to_the_global_values():
    rows = torch.tensor([[1.0, -1.0], [3.0, 1.0]])   # updates, not models
    params = torch.tensor([10.0, 20.0])
    combined = combine_updates(rows, [1.0, 1.0], params, clip=5.0)
    assert torch.equal(combined, torch.tensor([12.0, 20.0]))


def test_the_private_combination_counts_every_client_once_and_divides_by_the_expected():
    rows = torch.tensor([[1.0, 1.0], [3.0, 5.0]])
    params, noise = torch.zeros(2), torch.tensor([0.5, -0.5])
    combined = combine_updates(rows, [1.0, 0.0], params, clip=1.0, noise=noise,
                               expected_clients=2.0)
    assert torch.allclose(combined, torch.tensor([0.75, 0.25]))
    # Nobody reported: the noise is still released, over the same expected count.
    alone = combine_updates(rows, [0.0, 0.0], params, clip=1.0, noise=noise,
                            expected_clients=2.0)
    assert torch.allclose(alone, torch.tensor([0.25, -0.25]))


def test_shared_state_maps_a_file_of_client_variates_and_pickles_only_its_path(tmp_path):
    clients, params = 3, 4
    path = tmp_path / "c_i.f32"
    path.write_bytes(b"\0" * (clients * params * 4))
    shared = FedAvgShared(client_index=torch.arange(6), client_offsets=torch.tensor([0, 2, 4, 6]),
                          global_flat=torch.zeros(params), server_state={}, rows=2,
                          shared_table=True, controls=torch.zeros(params),
                          touched=torch.zeros(clients, dtype=torch.uint8),
                          controls_path=path)
    first = shared.client_controls()
    first[1] = 7.0
    again = pickle.loads(pickle.dumps(shared)).client_controls()
    assert torch.equal(again[1], torch.full((params,), 7.0))   # one file, seen by both
    assert torch.equal(shared.client_indices(2), torch.tensor([4, 5]))
    assert shared.client_sizes() == [2, 2, 2]
    with pytest.raises(dataclasses.FrozenInstanceError):
        shared.rows = 3          # a value: its parts are written in place, never replaced


def test_the_clients_are_cut_once_into_one_index_and_offsets():
    config = TrainConfig(strategy="fedavg", clients=4, partition="iid", seed=1)
    data = SimpleNamespace(train=SimpleNamespace(targets=torch.arange(10) % 2))
    index, offsets = cut_clients(config, data)
    assert offsets[0] == 0 and offsets[-1] == 10 and len(offsets) == 5
    assert sorted(index.tolist()) == list(range(10))


def test_stacked_clients_with_compile_are_refused_while_the_config_is_built():
    """A combination of settings alone, refused with the others (``refusals``): not only
    once the parent has dry-run the model."""
    import pytest

    from mptrain.errors import UserError

    with pytest.raises(UserError, match="vectorize.clients on and --compile: stacked clients"):
        TrainConfig(strategy="fedavg", vectorize_clients="on", compile=True)
    TrainConfig(strategy="fedavg", vectorize_clients="auto", compile=True)   # auto: not on
