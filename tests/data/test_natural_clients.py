"""NaturalClients, the per-client index natural data carries: offsets, not objects."""

import numpy as np
import pytest
import torch

from mptrain.data.natural.clients import NaturalClients, group_rows


def test_sizes_ids_and_names_from_offsets():
    clients = NaturalClients.from_sizes([2, 0, 3], [1, 1, 0], names=["a", "b", "c"])
    assert clients.count == 3
    assert clients.train_offsets.tolist() == [0, 2, 2, 5]
    assert clients.train_ids().tolist() == [0, 0, 2, 2, 2]
    assert clients.test_sizes().tolist() == [1, 1, 0]
    assert clients.name(2) == "c" and NaturalClients.from_sizes([1]).name(0) == "0"


@pytest.mark.parametrize("train, test", [
    (torch.tensor([1, 2]), None),                    # not from 0
    (torch.tensor([0, 3, 2]), None),                 # decreasing
    (torch.tensor([0, 1, 2]), torch.tensor([0, 1])),  # test of other clients
])
def test_offsets_that_describe_no_clients_are_refused(train, test):
    with pytest.raises(ValueError):
        NaturalClients(train_offsets=train, test_offsets=test)


def test_group_rows_keeps_each_clients_order_and_puts_the_unowned_last():
    order, sizes = group_rows(np.array([1, -1, 0, 1, 0]), 2)
    assert order.tolist() == [2, 4, 0, 3, 1] and sizes.tolist() == [2, 2]
