"""flwr-datasets' partitioners by their names (pathological:K, inner-dirichlet:ALPHA, the
size laws) and --partition natural, which takes the clients the data names."""

import numpy as np
import pytest
import torch

from mptrain.data.partition_laws import size_law_sizes
from mptrain.data.partitions import cut_training_set, parse_partition, partition_clients
from mptrain.data.sources import load_data
from mptrain.errors import UserError

pytestmark = pytest.mark.timeout(60)

LABELS = torch.arange(1000) % 10


@pytest.mark.parametrize("text", ["natural", "pathological:2", "inner-dirichlet:0.5",
                                  "linear", "square:3", "exponential:1"])
def test_the_names_parse_and_print_back(text):
    assert str(parse_partition(text)) == text


@pytest.mark.parametrize("text, needle", [
    ("natural:3", "natural takes no parameter"), ("pathological", "pathological:K"),
    ("pathological:0", "whole number >= 1"), ("inner-dirichlet", "inner-dirichlet:ALPHA"),
    ("linear:1:2", "linear:MIN"), ("pathologcal:2", "did you mean pathological:2"),
])
def test_malformed_names_are_one_line(text, needle):
    with pytest.raises(UserError, match=needle):
        parse_partition(text)


def test_pathological_gives_each_client_exactly_k_classes():
    parts = partition_clients("pathological:3", LABELS, 20, seed=0)
    assert all(len(torch.unique(LABELS[p])) == 3 for p in parts)
    owned = torch.cat(parts)
    assert len(torch.unique(owned)) == len(owned)   # disjoint


def test_pathological_refuses_more_classes_than_there_are():
    with pytest.raises(UserError, match="11 classes a client, but the data has 10"):
        partition_clients("pathological:11", LABELS, 5, seed=0)


def test_inner_dirichlet_has_equal_sizes_covers_all_and_skews_labels():
    parts = partition_clients("inner-dirichlet:0.1", LABELS, 10, seed=1)
    assert [len(p) for p in parts] == [100] * 10
    assert sorted(torch.cat(parts).tolist()) == list(range(1000))
    top_share = [np.bincount(LABELS[p], minlength=10).max() / len(p) for p in parts]
    assert np.mean(top_share) > 0.4   # iid would be ~0.13


@pytest.mark.parametrize("law, weights", [("linear", [1, 2, 3, 4]), ("square", [1, 4, 9, 16]),
                                          ("exponential", np.exp([1, 2, 3, 4]))])
def test_size_laws_follow_flwr_datasets_shares(law, weights):
    sizes = size_law_sizes(law, 1000, 4, None, law)
    expected = (np.asarray(weights, float) / np.sum(weights) * 1000).astype(int)
    expected[-1] += 1000 - expected.sum()
    assert sizes.tolist() == expected.tolist()
    parts = partition_clients(law, LABELS, 4, seed=0)
    assert [len(p) for p in parts] == expected.tolist()


def test_a_minimum_size_comes_first_and_empty_clients_are_refused():
    with pytest.raises(UserError, match="exponential:MIN"):
        partition_clients("exponential", LABELS, 50, seed=0)
    parts = partition_clients("exponential:5", LABELS, 50, seed=0)
    assert min(len(p) for p in parts) >= 5 and sum(len(p) for p in parts) == 1000


def test_natural_takes_the_datas_clients_and_refuses_pooled_data():
    bundle = load_data("synthetic:0,0", seed=0)
    index, offsets = cut_training_set("natural", bundle, 30, seed=0)
    assert torch.equal(index, torch.arange(len(bundle.train)))
    assert torch.equal(offsets, bundle.clients.train_offsets)
    with pytest.raises(UserError, match="30 natural clients"):
        cut_training_set("natural", bundle, 10, seed=0)
    with pytest.raises(UserError, match="natural needs data that names"):
        cut_training_set("natural", load_data("digits"), 20, seed=0)
    # Another partition cuts the pooled data.
    index, offsets = cut_training_set("iid", bundle, 7, seed=0)
    assert len(offsets) == 8 and sorted(index.tolist()) == list(range(len(bundle.train)))
