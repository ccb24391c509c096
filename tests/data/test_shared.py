"""Tests for mptrain.data.shared: stacking user data sets into two shared tensors."""

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset, IterableDataset, TensorDataset

from mptrain.data.shared import RowSource, SharedTensorDataset, materialize
from mptrain.errors import UserError


class Pairs(Dataset):
    """A plain map-style data set over a list of items."""

    def __init__(self, items):
        self.items = items

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        return self.items[index]


class Stream(IterableDataset):
    def __iter__(self):
        yield torch.zeros(2), 0


class GetItemOnly:
    def __getitem__(self, index):
        return torch.zeros(2), 0


def test_tensor_dataset_is_passed_through_without_copies():
    inputs, targets = torch.randn(6, 3), torch.arange(6)
    data = materialize(TensorDataset(inputs, targets), "training data")
    assert isinstance(data, SharedTensorDataset)
    assert data.inputs is inputs and data.targets is targets
    assert len(data) == 6


def test_shared_tensor_dataset_is_returned_as_is():
    data = SharedTensorDataset(torch.zeros(2, 1), torch.zeros(2))
    assert materialize(data, "training data") is data


def test_non_contiguous_tensor_dataset_becomes_contiguous():
    inputs = torch.randn(3, 4).t()  # [4, 3], not contiguous
    data = materialize(TensorDataset(inputs, torch.arange(4)), "training data")
    assert data.inputs.is_contiguous()
    assert torch.equal(data.inputs, inputs)


def test_map_style_pairs_are_stacked_with_int64_targets():
    generator = torch.Generator().manual_seed(0)
    samples = [torch.randn(1, 4, 4, generator=generator) for _ in range(5)]
    data = materialize(Pairs([(x, i % 3) for i, x in enumerate(samples)]), "training data")
    assert data.inputs.shape == (5, 1, 4, 4) and data.inputs.dtype == torch.float32
    assert torch.equal(data.inputs, torch.stack(samples))
    assert data.targets.dtype == torch.int64
    assert data.targets.tolist() == [0, 1, 2, 0, 1]


def test_lists_and_tuple_items_work():
    data = materialize([[torch.zeros(2), 1], (torch.ones(2), 0)], "training data")
    assert data.targets.tolist() == [1, 0]
    assert data.inputs.tolist() == [[0.0, 0.0], [1.0, 1.0]]


def test_numpy_inputs_and_targets():
    items = [(np.full((2, 3), i, dtype=np.float32), np.int64(i)) for i in range(4)]
    data = materialize(Pairs(items), "training data")
    assert data.inputs.shape == (4, 2, 3) and data.inputs.dtype == torch.float32
    assert data.inputs[:, 0, 0].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert data.targets.dtype == torch.int64 and data.targets.tolist() == [0, 1, 2, 3]


def test_non_contiguous_numpy_inputs():
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    data = materialize(Pairs([(array.T, 0), (array.T, 1)]), "training data")
    assert torch.equal(data.inputs[0], torch.from_numpy(np.ascontiguousarray(array.T)))


def test_float_targets_become_float32():
    data = materialize(Pairs([(torch.zeros(1), 0.5), (torch.zeros(1), np.float64(-2.0))]),
                       "training data")
    assert data.targets.dtype == torch.float32
    assert data.targets.tolist() == [0.5, -2.0]


def test_tensor_targets_keep_their_shape():
    data = materialize(Pairs([(torch.zeros(2), torch.tensor([1.0, 2.0]))] * 3), "training data")
    assert data.targets.shape == (3, 2) and data.targets.dtype == torch.float32


@pytest.mark.parametrize("items, needle", [
    ([torch.zeros(2), torch.zeros(2)], r"training data\[0\] is a Tensor"),
    ([(torch.zeros(2), 0), (torch.zeros(2), 0, 1)], r"training data\[1\] is a tuple"),
    ([(torch.zeros(2), 0), {"x": 1}], r"training data\[1\] is a dict"),
    ([(torch.zeros(2),)], "pair"),
])
def test_items_that_are_not_pairs(items, needle):
    with pytest.raises(UserError, match=needle):
        materialize(Pairs(items), "training data")


def test_items_of_unknown_type():
    with pytest.raises(UserError, match=r"training data\[0\] holds a str"):
        materialize(Pairs([("abc", 1)]), "training data")


def test_inputs_of_different_shapes():
    with pytest.raises(UserError, match="same shape") as info:
        materialize(Pairs([(torch.zeros(3, 2), 0), (torch.zeros(4, 2), 1)]), "test data")
    assert str(info.value).startswith("test data")


def test_sequences_of_different_lengths_are_held_end_to_end_for_a_collate():
    held = materialize(Pairs([(torch.zeros(3), 0), (torch.ones(4), 1)]), "test data")
    assert held.values.tolist() == [0.0] * 3 + [1.0] * 4 and held.offsets.tolist() == [0, 3, 7]


@pytest.mark.parametrize("make", [
    lambda s: TensorDataset(s, torch.arange(3)),
    lambda s: Pairs([(row, 0) for row in s]),
    lambda s: Pairs([(torch.zeros(3), row) for row in s]),
], ids=["tensor-dataset", "sparse-inputs", "sparse-targets"])
def test_sparse_tensors_are_refused(make):
    sparse = torch.eye(3).to_sparse()
    with pytest.raises(UserError, match=r"to_dense\(\)"):
        materialize(make(sparse), "training data")


@pytest.mark.parametrize("data", [[], Pairs([])], ids=["list", "dataset"])
def test_empty_data_set(data):
    with pytest.raises(UserError, match="training data is empty"):
        materialize(data, "training data")


def test_empty_tensor_dataset():
    with pytest.raises(UserError, match="empty"):
        materialize(TensorDataset(torch.zeros(0, 3), torch.zeros(0, dtype=torch.int64)),
                    "training data")


@pytest.mark.parametrize("data", [Stream(), GetItemOnly(), iter([(torch.zeros(1), 0)]), 42],
                         ids=["iterable-dataset", "getitem-only", "iterator", "int"])
def test_not_map_style(data):
    with pytest.raises(UserError, match="not a map-style Dataset"):
        materialize(data, "training data")


def test_inputs_and_targets_must_have_the_same_length():
    with pytest.raises(UserError, match="3 inputs but 2 targets"):
        SharedTensorDataset(torch.zeros(3, 1), torch.zeros(2))


def test_share_memory_makes_it_shared():
    data = SharedTensorDataset(torch.randn(10, 3), torch.arange(10))
    before = data.inputs.clone()
    assert not data.is_shared
    assert data.share_memory_() is data
    assert data.is_shared
    assert data.inputs.is_shared() and data.targets.is_shared()
    assert torch.equal(data.inputs, before)


def test_batch_returns_the_rows():
    inputs = torch.arange(20, dtype=torch.float32).reshape(10, 2)
    targets = torch.arange(10) * 10
    data = SharedTensorDataset(inputs, targets)
    x, y = data.batch(torch.tensor([7, 0, 7, 3]))
    assert x.tolist() == [[14.0, 15.0], [0.0, 1.0], [14.0, 15.0], [6.0, 7.0]]
    assert y.tolist() == [70, 0, 70, 30]
    assert data[3][0].tolist() == [6.0, 7.0] and data[3][1].item() == 30


def test_nbytes():
    data = SharedTensorDataset(torch.zeros(4, 3, dtype=torch.float32),
                               torch.zeros(4, dtype=torch.int64))
    assert data.nbytes == 4 * 3 * 4 + 4 * 8


def _counting_source(rows=25, chunk=10):
    """A RowSource whose row i is all i, recording which ranges were filled."""
    calls = []

    def fill(out, start):
        calls.append((start, len(out)))
        out.copy_(torch.arange(start, start + len(out), dtype=torch.float32).view(-1, 1, 1)
                  .expand_as(out))

    return RowSource((rows, 2, 3), torch.float32, fill, rows_per_chunk=chunk), calls


def test_row_source_is_built_straight_into_shared_memory_in_chunks():
    source, calls = _counting_source()
    data = SharedTensorDataset(source, torch.arange(25))
    assert len(data) == 25 and data.input_shape == (2, 3)
    assert data.nbytes == 25 * 6 * 4 + 25 * 8
    data.share_memory_()
    assert calls == [(0, 10), (10, 10), (20, 5)]
    assert data.is_shared
    assert torch.equal(data.inputs[:, 0, 0], torch.arange(25, dtype=torch.float32))


def test_row_source_head_builds_only_the_rows_asked_for():
    source, calls = _counting_source()
    data = SharedTensorDataset(source, torch.arange(25))
    head = data.head(2)
    assert calls == [(0, 2)] and head.shape == (2, 2, 3)
    assert torch.equal(head[:, 0, 0], torch.tensor([0.0, 1.0]))


def test_row_source_is_built_privately_on_first_use():
    source, calls = _counting_source()
    data = SharedTensorDataset(source, torch.arange(25))
    inputs, targets = data.batch(torch.tensor([3, 21]))
    assert torch.equal(inputs[:, 1, 2], torch.tensor([3.0, 21.0]))
    assert torch.equal(targets, torch.tensor([3, 21]))
    assert not data.inputs.is_shared()
    data.batch(torch.tensor([0]))
    assert len(calls) == 3  # built once


def test_row_source_with_the_wrong_number_of_targets():
    source, _ = _counting_source()
    with pytest.raises(UserError, match="25 inputs but 3 targets"):
        SharedTensorDataset(source, torch.arange(3))


class _Raises(torch.utils.data.Dataset):
    def __init__(self, where):
        self.where = where

    def __len__(self):
        if self.where == "len":
            raise TypeError("object of type 'generator' has no len()")
        return 10

    def __getitem__(self, index):
        if index == 7:
            raise KeyError("row 7 is missing\n(a second line)")
        return torch.zeros(3), 1


@pytest.mark.parametrize("where, expected", [
    ("item", "reading training data[7] raised KeyError: 'row 7 is missing\\n(a second line)'"),
    ("len", "reading len(training data) raised TypeError: object of type 'generator' has no "
            "len()"),
])
def test_a_data_set_that_raises_is_one_line_naming_the_sample(where, expected):
    with pytest.raises(UserError) as info:
        materialize(_Raises(where), "training data")
    assert str(info.value).startswith(expected + "; ")


@pytest.mark.parametrize("wrap", [lambda x, y: TensorDataset(x, y),
                                  lambda x, y: Pairs(list(zip(x, y)))],
                         ids=["tensor-dataset", "pairs"])
def test_boolean_targets_are_the_classes_0_and_1(wrap):
    # A mask as labels (y > 0): cross-entropy refused bool targets in every worker.
    inputs = torch.randn(6, 2)
    data = materialize(wrap(inputs, inputs[:, 0] > 0), "training data")
    assert data.targets.dtype == torch.int64
    assert data.targets.tolist() == (inputs[:, 0] > 0).long().tolist()



class Augmenting(Dataset):
    """A __getitem__ that adds fresh noise at every read (random augmentation)."""

    def __len__(self):
        return 6

    def __getitem__(self, index):
        return torch.full((3,), float(index)) + torch.randn(3), index % 2


class Missing(Dataset):
    """The same values at every read, a NaN among them (a missing value is not noise)."""

    def __len__(self):
        return 4

    def __getitem__(self, index):
        return torch.tensor([float("nan"), float(index)]), np.int64(index % 2)


def test_stacking_notes_a_getitem_that_gives_other_values_when_read_again():
    # The data is read once and stacked: a random augmentation was frozen without a word.
    assert materialize(Augmenting(), "training data").varied_sample == 0
    assert materialize(Missing(), "training data").varied_sample is None
    assert materialize(Pairs([(torch.zeros(2), 0)]), "training data").varied_sample is None


def test_a_seeded_stacking_still_notes_the_augmentation():
    # The stacking is seeded (the same seed, the same data): the second read of a sample
    # is within the same stacking, so the generators have moved on and it differs.
    from mptrain.data.seeding import seeded

    with seeded(0):
        assert materialize(Augmenting(), "training data").varied_sample == 0
