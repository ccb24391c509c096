"""The heterogeneity figures of `mptrain partitions`: Hellinger distances to the pooled label
mix and the size Gini, on known cases and against flwr-datasets' own counts."""

import numpy as np
import pytest

from mptrain.data.heterogeneity import gini, heterogeneity, hellinger_to_pooled, label_counts
from mptrain.data.partitions import cut_training_set
from mptrain.data.sources import load_data

pytestmark = pytest.mark.timeout(60)


def test_hellinger_is_zero_for_the_pooled_mix_and_one_for_disjoint_labels():
    same = hellinger_to_pooled(np.array([[5, 5], [2, 2]]))
    assert np.allclose(same, 0)
    disjoint = hellinger_to_pooled(np.array([[4, 0, 0], [0, 4, 0], [0, 0, 4]]))
    # each client: p = e_i, pooled = 1/3 each: sqrt(1/2 ((1 - sqrt(1/3))^2 + 2/3))
    assert np.allclose(disjoint, np.sqrt(0.5 * ((1 - np.sqrt(1 / 3)) ** 2 + 2 / 3)))


def test_gini_of_sizes():
    assert gini(np.array([5, 5, 5])) == 0
    assert np.isclose(gini(np.array([0, 0, 0, 8])), 0.75)
    assert np.isclose(gini(np.array([1, 2, 3])), 2 / 9)


def test_counts_follow_the_cut():
    labels = np.array([0, 1, 1, 2, 2, 2])
    counts = label_counts(labels, np.array([5, 0, 1, 2, 3, 4]), np.array([0, 2, 6]), 3)
    assert counts.tolist() == [[1, 0, 1], [0, 2, 2]]


def test_the_figures_agree_with_flwr_datasets_metrics():
    datasets = pytest.importorskip("datasets")
    metrics = pytest.importorskip("flwr_datasets.metrics")
    from flwr_datasets.partitioner import NaturalIdPartitioner

    bundle = load_data("digits")
    index, offsets = cut_training_set("dirichlet:0.3", bundle, 12, seed=5)
    labels = bundle.train.targets.numpy()
    owner = np.repeat(np.arange(12), np.diff(offsets.numpy()))
    table = datasets.Dataset.from_dict({"label": labels[index.numpy()].tolist(),
                                        "client": owner.tolist()})
    partitioner = NaturalIdPartitioner(partition_by="client")
    partitioner.dataset = table
    frequencies = metrics.compute_frequencies(partitioner, column_name="label")
    counts = metrics.compute_counts(partitioner, column_name="label")
    ours = heterogeneity(labels, index.numpy(), offsets.numpy(), 10)
    # flwr's partition ids follow the client column's order of appearance: 0..11 here.
    own = frequencies.sort_index().reindex(columns=range(10), fill_value=0).to_numpy()
    pooled = counts.sort_index().reindex(columns=range(10), fill_value=0).to_numpy().sum(0)
    pooled = pooled / pooled.sum()
    theirs = np.sqrt(0.5 * ((np.sqrt(own) - np.sqrt(pooled)) ** 2).sum(1))
    assert np.allclose(ours.hellinger, theirs)
    sizes = counts.sum(axis=1).sort_index().to_numpy()
    assert np.isclose(ours.size_gini, gini(sizes))
