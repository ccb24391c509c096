"""Tests for mptrain.data.partitions: federated client splits, pure functions, no processes."""

import textwrap

import pytest
import torch

from mptrain.data.partitions import (PartitionSpec, default_min_size, parse_partition,
                                     partition_clients)
from mptrain.errors import UserError
from mptrain.report.partitions import Spread, partition_stats, stats_rows

# 1,000 samples, 10 classes of 100, interleaved so that label order != index order.
BALANCED = torch.arange(1000) % 10


def skewed_labels(n=1438, seed=3):
    """Unbalanced classes, like a real data set."""
    weights = torch.tensor([1.0, 2, 3, 1, 5, 1, 1, 2, 4, 1])
    return torch.multinomial(weights, n, replacement=True,
                             generator=torch.Generator().manual_seed(seed))


def assert_disjoint_in_range(parts, n):
    everything = torch.cat(parts)
    assert everything.dtype == torch.int64
    assert len(torch.unique(everything)) == len(everything)
    assert everything.min() >= 0 and everything.max() < n
    assert all(len(part) > 0 for part in parts)


@pytest.mark.parametrize("spec", ["iid", "dirichlet:0.5", "dirichlet:0.2:2", "dirichlet:100"])
@pytest.mark.parametrize("clients", [1, 7, 50])
def test_iid_and_dirichlet_are_disjoint_and_cover_everything(spec, clients):
    labels = skewed_labels()
    parts = partition_clients(spec, labels, clients, seed=0)
    assert len(parts) == clients
    assert_disjoint_in_range(parts, len(labels))
    assert torch.equal(torch.cat(parts).sort().values, torch.arange(len(labels)))
    assert all(torch.equal(part, part.sort().values) for part in parts)


@pytest.mark.parametrize("samples, clients", [(1438, 100), (10, 10), (11, 3), (5, 1)])
def test_iid_sizes_differ_by_at_most_one(samples, clients):
    parts = partition_clients("iid", torch.zeros(samples, dtype=torch.long), clients, seed=1)
    sizes = [len(part) for part in parts]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == samples


@pytest.mark.parametrize("spec, minimum", [("dirichlet:0.5", default_min_size(1438, 20)),
                                           ("dirichlet:0.3:25", 25),
                                           ("dirichlet:1.0", default_min_size(1438, 20))])
def test_dirichlet_holds_the_minimum_size(spec, minimum):
    parts = partition_clients(spec, skewed_labels(), 20, seed=4)
    assert min(len(part) for part in parts) >= minimum


def test_default_minimum_is_a_tenth_of_the_share_between_1_and_10():
    assert default_min_size(60_000, 100) == 10
    assert default_min_size(1438, 10) == 10
    assert default_min_size(1438, 50) == 2
    assert default_min_size(1438, 100) == 1


def test_dirichlet_small_alpha_skews_labels_large_alpha_does_not():
    labels = skewed_labels()
    skewed = partition_stats(partition_clients("dirichlet:0.05:1", labels, 10, 0), labels)
    even = partition_stats(partition_clients("dirichlet:1000", labels, 10, 0), labels)
    assert skewed.labels.median < even.labels.median == 10


@pytest.mark.parametrize("spec", ["iid", "dirichlet:0.5", "shards:2"])
def test_same_seed_same_partition_other_seed_another(spec):
    labels = skewed_labels()
    first = partition_clients(spec, labels, 30, seed=5)
    again = partition_clients(spec, labels, 30, seed=5)
    other = partition_clients(spec, labels, 30, seed=6)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not all(torch.equal(a, b) for a, b in zip(first, other))


def test_negative_seed_is_accepted_and_deterministic():
    first = partition_clients("iid", BALANCED, 4, seed=-1)
    assert all(torch.equal(a, b) for a, b in zip(first, partition_clients("iid", BALANCED, 4, -1)))


@pytest.mark.parametrize("clients", [5, 25, 50])
def test_two_shards_give_at_most_two_labels_on_balanced_data(clients):
    parts = partition_clients("shards:2", BALANCED, clients, seed=0)
    assert_disjoint_in_range(parts, len(BALANCED))
    assert all(len(torch.unique(BALANCED[part])) <= 2 for part in parts)
    assert len({len(part) for part in parts}) == 1


def test_shards_drop_the_remainder_in_label_order():
    labels = skewed_labels(n=1003)
    parts = partition_clients("shards:3", labels, 10, seed=0)  # 30 shards of 33: 13 left over
    assert sum(len(part) for part in parts) == 990
    assert_disjoint_in_range(parts, len(labels))
    dropped = set(range(1003)) - set(torch.cat(parts).tolist())
    assert all(labels[i] == labels.max() for i in dropped)


def test_parse_partition_keeps_the_parameters():
    assert parse_partition(" iid ") == PartitionSpec("iid")
    assert parse_partition("dirichlet:0.5") == PartitionSpec("dirichlet", alpha=0.5)
    assert parse_partition("dirichlet:2:7") == PartitionSpec("dirichlet", alpha=2.0, min_size=7)
    assert parse_partition("shards:3") == PartitionSpec("shards", shards=3)
    assert parse_partition("my.mod:split") == PartitionSpec("function", function="my.mod:split")
    assert str(parse_partition("dirichlet:0.50:3")) == "dirichlet:0.5:3"


@pytest.mark.parametrize("spec, clients, message", [
    ("random", 10, "unknown --partition 'random'; choose iid, dirichlet:ALPHA"),
    ("", 10, "unknown --partition"),
    ("iid:3", 10, "iid takes no parameter"),
    ("dirichlet", 10, "write dirichlet:ALPHA"),
    ("dirichlet:0.5:3:4", 10, "malformed"),
    ("dirichlet:abc", 10, "ALPHA must be a number > 0"),
    ("dirichlet:0", 10, "ALPHA must be a number > 0"),
    ("dirichlet:-1", 10, "ALPHA must be a number > 0"),
    ("dirichlet:nan", 10, "ALPHA must be a number > 0"),
    ("dirichlet:inf", 10, "ALPHA must be a number > 0"),
    ("dirichlet:0.5:0", 10, "MIN to be a whole number >= 1"),
    ("dirichlet:0.5:200", 10, "need 2000, but there are 1000; lower MIN or --clients"),
    ("dirichlet:0.01:99", 10, "raise ALPHA or lower --clients or MIN"),
    ("shards", 10, "write shards:K"),
    ("shards:0", 10, "K to be a whole number >= 1"),
    ("shards:1.5", 10, "K to be a whole number >= 1"),
    ("shards:x", 10, "K to be a whole number >= 1"),
    ("shards:2", 501, "needs 1002 shards but there are only 1000 samples; lower K or --clients"),
    ("iid", 0, "--clients must be a whole number >= 1"),
    ("iid", -3, "--clients must be a whole number >= 1"),
    ("iid", 1001, "--clients 1001 is more than the 1000 training samples"),
])
def test_bad_input_is_one_line_saying_what_to_change(spec, clients, message):
    with pytest.raises(UserError) as info:
        partition_clients(spec, BALANCED, clients, seed=0)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("spec", ["dirichlet:0.5", "shards:2"])
def test_label_schemes_refuse_regression_targets(spec):
    with pytest.raises(UserError, match="needs class labels.*use iid or a partition function"):
        partition_clients(spec, torch.randn(100, 1), 4, seed=0)


USER_FUNCTIONS = '''
import numpy as np
import torch

def good(targets, clients, seed):
    return [list(range(c, len(targets), clients)) for c in range(clients)]

def as_arrays(targets, clients, seed):
    return np.array_split(np.arange(len(targets))[::-1], clients)

def overlapping(targets, clients, seed):
    parts = [[c] for c in range(clients)]
    parts[9].append(17)
    parts[3].append(17)
    return parts

def repeated(targets, clients, seed):
    return [[c, c] for c in range(clients)]

def out_of_range(targets, clients, seed):
    return [[c] for c in range(clients - 1)] + [[len(targets)]]

def negative(targets, clients, seed):
    return [[-1]] + [[c] for c in range(1, clients)]

def wrong_count(targets, clients, seed):
    return [[c] for c in range(clients + 1)]

def empty_client(targets, clients, seed):
    return [[c] for c in range(clients - 1)] + [[]]

def floats(targets, clients, seed):
    return [[float(c)] for c in range(clients)]

def nested(targets, clients, seed):
    return [[[c]] for c in range(clients)]

def not_a_list(targets, clients, seed):
    return 42

def raises(targets, clients, seed):
    raise RuntimeError("no labels today")
'''


@pytest.fixture
def user_file(tmp_path):
    path = tmp_path / "splits.py"
    path.write_text(textwrap.dedent(USER_FUNCTIONS))
    return path


def test_user_function_from_a_file_is_accepted(user_file):
    parts = partition_clients(f"{user_file}:good", BALANCED, 10, seed=0)
    assert_disjoint_in_range(parts, len(BALANCED))
    assert torch.equal(parts[3], torch.arange(3, 1000, 10))
    parts = partition_clients(f"{user_file}:as_arrays", BALANCED, 3, seed=0)
    assert [len(part) for part in parts] == [334, 333, 333]
    assert all(torch.equal(part, part.sort().values) for part in parts)


def test_user_function_from_a_module_gets_targets_clients_and_seed(tmp_path, monkeypatch):
    (tmp_path / "my_partitions_mod.py").write_text(textwrap.dedent('''
        SEEN = []
        def split(targets, clients, seed):
            SEEN.append((len(targets), clients, seed))
            return [[c] for c in range(clients)]
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    parts = partition_clients("my_partitions_mod:split", BALANCED, 4, seed=9)
    import my_partitions_mod
    assert my_partitions_mod.SEEN == [(1000, 4, 9)]
    assert [part.tolist() for part in parts] == [[0], [1], [2], [3]]


@pytest.mark.parametrize("name, message", [
    ("overlapping", "returned overlapping indices: sample 17 is in clients 3 and 9"),
    ("repeated", "returned overlapping indices: sample 0 is twice in client 0"),
    ("out_of_range", "returned index 1000 for client 9; indices must be in 0..999"),
    ("negative", "returned index -1 for client 0"),
    ("wrong_count", "returned 11 parts for --clients 10"),
    ("empty_client", "left client 9 empty"),
    ("floats", "for client 0; each part must be a flat sequence of integer sample indices"),
    ("nested", "each part must be a flat sequence of integer sample indices"),
    ("not_a_list", "returned int; it must return a list of index lists"),
    ("raises", "raised RuntimeError: no labels today"),
    ("missing", "has no attribute 'missing'"),
])
def test_bad_user_function_is_refused_in_one_line(user_file, name, message):
    with pytest.raises(UserError) as info:
        partition_clients(f"{user_file}:{name}", BALANCED, 10, seed=0)
    assert message in str(info.value)
    assert "\n" not in str(info.value)
    if name != "missing":
        assert str(info.value).startswith(f"partition function {user_file}:{name} ")


def test_stats_count_sizes_and_distinct_labels():
    labels = torch.tensor([0, 0, 1, 1, 2, 2, 3])
    parts = [torch.tensor([0, 1]), torch.tensor([2, 4, 6]), torch.tensor([3, 5])]
    stats = partition_stats(parts, labels)
    assert stats.clients == 3
    assert stats.samples == Spread(min=2, median=2.0, max=3)
    assert stats.labels == Spread(min=1, median=2.0, max=3)
    assert stats_rows(stats) == [("samples per client", "2", "2", "3"),
                                 ("distinct labels per client", "1", "2", "3")]
    regression = partition_stats(parts[:2])
    assert regression.labels is None and regression.samples.median == 2.5
    assert stats_rows(regression) == [("samples per client", "2", "2.5", "3")]


# -- functions given from Python (fit(partition=...)) ----------------------------------------

def test_two_lambdas_go_by_two_names_that_say_where_they_are():
    """Both went by '<module>:<lambda>': a resume of a run cut by the first, given the
    second, was taken as the same partition and cut other clients without a word."""
    from mptrain.data.partitions import given_function, user_partition

    evens = lambda targets, clients, seed: [torch.arange(0, 4, 2), torch.arange(1, 4, 2)]  # noqa: E731
    halves = lambda targets, clients, seed: [torch.arange(0, 2), torch.arange(2, 4)]  # noqa: E731
    first, second = given_function(evens), given_function(halves)
    line, qualname = evens.__code__.co_firstlineno, evens.__qualname__
    assert qualname.endswith("<locals>.<lambda>") and qualname == halves.__qualname__
    assert first == f"{__name__}:{qualname}@test_partitions.py:{line}"
    assert second == f"{__name__}:{qualname}@test_partitions.py:{line + 1}"
    targets = torch.zeros(4, dtype=torch.int64)
    assert [p.tolist() for p in user_partition(first, targets, 2, 0)] == [[0, 2], [1, 3]]
    assert [p.tolist() for p in user_partition(second, targets, 2, 0)] == [[0, 1], [2, 3]]
    assert parse_partition(first) == PartitionSpec("function", function=first)


def test_a_named_function_keeps_its_import_string():
    from mptrain.data.partitions import given_function

    assert given_function(textwrap.dedent) == "textwrap:dedent"
