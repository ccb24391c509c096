"""Tests for mptrain.data.sources: built-in data sets, MNIST from IDX files, user factories."""

import sys
import textwrap

import numpy as np
import pytest
import torch
from torch.utils.data import TensorDataset

import mptrain
from mptrain.data.fingerprint import fingerprint
from mptrain.data.shared import SharedTensorDataset
from mptrain.data.sources import (with_data_dtype, CLASSIFICATION, MNIST_MEAN, MNIST_STD, REGRESSION, DataBundle,
                                  digits_60k, infer_task, load_data)
from mptrain.errors import UserError


@pytest.fixture(scope="module")
def digits():
    return load_data("digits")


def test_digits_sizes_and_shapes(digits):
    assert isinstance(digits, DataBundle)
    assert (len(digits.train), len(digits.test)) == (1438, 359)
    assert digits.input_shape == (1, 8, 8)
    assert digits.train.inputs.shape == (1438, 1, 8, 8)
    assert digits.train.inputs.dtype == torch.float32
    assert digits.train.targets.dtype == torch.int64
    assert (digits.task, digits.output_size, digits.default_model) == \
        (CLASSIFICATION, 10, "digits-cnn")
    for part in (digits.train, digits.test):
        assert sorted(part.targets.unique().tolist()) == list(range(10))
    # Pixels 0..16 scaled to [-1, 1].
    assert digits.train.inputs.min() == -1.0 and digits.train.inputs.max() == 1.0


def test_digits_split_is_a_partition_of_the_1797_samples(digits):
    from sklearn.datasets import load_digits

    raw = load_digits()
    every = torch.cat([digits.train.inputs, digits.test.inputs]).flatten(1)
    expected = (torch.from_numpy(raw.images.astype(np.float32)).flatten(1) / 16.0 - 0.5) / 0.5
    assert every.shape[0] == 1797
    assert sorted_rows(every) == sorted_rows(expected)


def sorted_rows(tensor):
    """The rows as a sorted list: equal for two tensors holding the same multiset of rows."""
    return sorted(map(tuple, tensor.tolist()))


def test_digits_split_is_fixed(digits):
    torch.manual_seed(12345)  # the global seed must not move the split
    again = load_data("digits")
    assert torch.equal(again.train.inputs, digits.train.inputs)
    assert torch.equal(again.test.targets, digits.test.targets)


def test_digits_defaults(digits):
    d = digits.defaults
    assert (d.epochs, d.batch_size, d.lr, d.optimizer) == (10, 32, 0.05, "sgd")


def test_linreg():
    data = load_data("linreg")
    assert (len(data.train), len(data.test)) == (80, 20)
    assert (data.task, data.output_size, data.default_model) == (REGRESSION, 1, "linear")
    assert data.input_shape == (1,)
    x = torch.cat([data.train.inputs, data.test.inputs]).flatten()
    assert x.dtype == torch.float32 and data.train.targets.dtype == torch.float32
    assert data.train.targets.shape == (80, 1)
    assert x.min() == -10.0 and x.max() == 10.0
    assert torch.allclose(x.sort().values, torch.linspace(-10, 10, 100))
    # y = 2x + 3 + N(0, 1): a least-squares fit recovers the line.
    y = torch.cat([data.train.targets, data.test.targets]).flatten()
    slope, intercept = np.polyfit(x.numpy(), y.numpy(), 1)
    assert abs(slope - 2) < 0.1 and abs(intercept - 3) < 0.5
    assert torch.equal(load_data("linreg").train.targets, data.train.targets)


# ---------------------------------------------------------------- MNIST from tiny IDX files

def idx_bytes(array, magic):
    header = magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in array.shape)
    return header + array.astype(np.uint8).tobytes()


def write_tiny_mnist(folder, n_train=6, n_test=4):
    rng = np.random.default_rng(1)
    arrays = {}
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        images[0, 0, :2] = (0, 255)  # the two extremes of the normalisation
        labels = (np.arange(n) % 10).astype(np.uint8)
        (folder / f"{prefix}-images-idx3-ubyte").write_bytes(idx_bytes(images, 0x00000803))
        (folder / f"{prefix}-labels-idx1-ubyte").write_bytes(idx_bytes(labels, 0x00000801))
        arrays[prefix] = images, labels
    return arrays


def test_mnist_from_idx_files(tmp_path):
    arrays = write_tiny_mnist(tmp_path)
    data = load_data("mnist", str(tmp_path))
    assert (len(data.train), len(data.test)) == (6, 4)
    assert data.input_shape == (1, 28, 28)
    assert (data.task, data.output_size, data.default_model) == \
        (CLASSIFICATION, 10, "mnist-cnn")
    assert (MNIST_MEAN, MNIST_STD) == (0.1307, 0.3081)
    for part, prefix in ((data.train, "train"), (data.test, "t10k")):
        images, labels = arrays[prefix]
        expected = (torch.from_numpy(images).float() / 255.0 - 0.1307) / 0.3081
        inputs = part.batch(torch.arange(len(part)))[0]
        assert part.inputs.dtype == torch.uint8 and inputs.dtype == torch.float32
        torch.testing.assert_close(inputs.squeeze(1), expected)
        assert part.targets.dtype == torch.int64
        assert part.targets.tolist() == labels.tolist()
    first = data.train.head(1)[0, 0, 0]
    assert first[0].item() == pytest.approx(-0.1307 / 0.3081, abs=1e-6)
    assert first[1].item() == pytest.approx((1 - 0.1307) / 0.3081, abs=1e-6)


def test_mnist_pixels_stay_uint8_and_decode_to_the_float32_sets_bits(tmp_path):
    # --data-dtype: a quarter of the memory, and every batch, sample and fingerprint the
    # same as the set converted up front.
    write_tiny_mnist(tmp_path)
    held = load_data("mnist", str(tmp_path))
    floats = with_data_dtype(load_data("mnist", str(tmp_path)), "float32")
    assert held.train.inputs.dtype == torch.uint8 and floats.train.inputs.dtype == torch.float32
    assert held.nbytes * 4 - floats.nbytes == 3 * (6 + 4) * 8   # the targets stay int64
    every = torch.arange(6)
    assert torch.equal(held.train.batch(every)[0], floats.train.batch(every)[0])
    assert torch.equal(held.train[3][0], floats.train[3][0])
    assert fingerprint(held) == fingerprint(floats)
    assert with_data_dtype(held, "auto") is held


def test_data_dtype_uint8_is_refused_where_there_are_no_pixels():
    with pytest.raises(UserError, match="data_dtype uint8 keeps images that their source "
                                        "gives as uint8 pixels"):
        mptrain.fit(torch.nn.Linear(1, 1), load_data("linreg"), data_dtype="uint8")


def test_mnist_without_data_dir():
    with pytest.raises(UserError, match="--data mnist needs --data-dir"):
        load_data("mnist")


def test_mnist_with_missing_files(tmp_path):
    with pytest.raises(UserError, match="MNIST files missing"):
        load_data("mnist", str(tmp_path))


@pytest.mark.parametrize("name", ["digits", "linreg"])
def test_data_dir_without_mnist(tmp_path, name):
    with pytest.raises(UserError, match="--data-dir is only used with --data mnist"):
        load_data(name, str(tmp_path))


@pytest.mark.parametrize("name", ["bogus", "MNIST", ""])
def test_unknown_name(name):
    with pytest.raises(UserError, match="unknown data set") as info:
        load_data(name)
    assert "digits, digits-60k, linreg, mnist" in str(info.value)


# ---------------------------------------------------------------- user factories

FACTORIES = """
import torch
from torch.utils.data import Dataset, TensorDataset

class Pairs(Dataset):
    def __len__(self):
        return 3

    def __getitem__(self, index):
        return torch.full((2,), float(index)), index


def good():
    x = torch.arange(24, dtype=torch.float32).reshape(12, 2)
    y = torch.arange(12) % 4
    return TensorDataset(x, y), TensorDataset(x[:5], y[:5])


def regression():
    return TensorDataset(torch.randn(8, 3), torch.randn(8, 2)), None


def train_only():
    return Pairs(), None


def as_list():
    return [Pairs(), Pairs()]


def raises():
    raise ValueError("the bucket is gone")


def one_thing():
    return TensorDataset(torch.zeros(2, 1), torch.zeros(2))


def triple():
    return Pairs(), Pairs(), Pairs()


def not_a_dataset():
    return 5, None


def empty():
    return TensorDataset(torch.zeros(0, 2), torch.zeros(0, dtype=torch.int64)), None


NOT_CALLABLE = 42
"""


@pytest.fixture
def factory_module(tmp_path, request, monkeypatch):
    """A module file with the factories above under a name unique to the test.

    Yields ``(file_spec_prefix, module_spec_prefix)``: "path/to/file.py" and "module".
    """
    name = "mptrain_factories_" + request.node.name.translate(
        str.maketrans({c: "_" for c in "[]-./: "}))
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(FACTORIES))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield str(path), name
    for key in (name, f"mptrain_user_{name}"):
        sys.modules.pop(key, None)


@pytest.fixture(params=["file", "module"])
def spec(request, factory_module):
    """Turn a factory name into an import string, in both accepted forms."""
    file_prefix, module_prefix = factory_module
    prefix = file_prefix if request.param == "file" else module_prefix
    return lambda attr: f"{prefix}:{attr}"


def test_good_factory(spec):
    data = load_data(spec("good"))
    assert data.name == spec("good")
    assert isinstance(data.train, SharedTensorDataset)
    assert (len(data.train), len(data.test)) == (12, 5)
    assert (data.task, data.output_size, data.default_model) == (CLASSIFICATION, 4, "mlp")
    assert data.input_shape == (2,)
    assert data.train.inputs[3].tolist() == [6.0, 7.0]


def test_factory_for_regression(spec):
    data = load_data(spec("regression"))
    assert (data.task, data.output_size) == (REGRESSION, 2)
    assert data.test is None


@pytest.mark.parametrize("attr", ["train_only", "as_list"])
def test_factory_with_map_style_data_set(spec, attr):
    data = load_data(spec(attr))
    assert data.train.inputs.tolist() == [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]]
    assert data.train.targets.tolist() == [0, 1, 2]
    assert (data.task, data.output_size) == (CLASSIFICATION, 3)
    assert (data.test is None) == (attr == "train_only")


def test_factory_that_raises(spec):
    with pytest.raises(UserError, match="the factory raised ValueError: the bucket is gone"):
        load_data(spec("raises"))


@pytest.mark.parametrize("attr, needle", [
    ("one_thing", "returned TensorDataset; the factory must return a pair"),
    ("triple", "returned tuple; the factory must return a pair"),
    ("not_a_dataset", "training data is a int, not a map-style Dataset"),
])
def test_factory_returning_the_wrong_type(spec, attr, needle):
    with pytest.raises(UserError, match=needle):
        load_data(spec(attr))


def test_factory_returning_empty_data(spec):
    with pytest.raises(UserError, match="empty"):
        load_data(spec("empty"))


def test_missing_attribute(spec):
    with pytest.raises(UserError, match="has no attribute 'nothing_here'"):
        load_data(spec("nothing_here"))


def test_not_callable(spec):
    with pytest.raises(UserError, match="is not callable"):
        load_data(spec("NOT_CALLABLE"))


def test_missing_module():
    with pytest.raises(UserError, match="cannot import module 'nomodule_xyz_123'"):
        load_data("nomodule_xyz_123:make")


def test_missing_file(tmp_path):
    path = tmp_path / "absent.py"
    with pytest.raises(UserError, match="does not exist") as info:
        load_data(f"{path}:make")
    assert str(path) in str(info.value)


@pytest.mark.parametrize("spec_text", [":make", "module:"])
def test_incomplete_import_string(spec_text):
    with pytest.raises(UserError, match="not an import string"):
        load_data(spec_text)


def test_module_that_fails_to_import(tmp_path, monkeypatch):
    (tmp_path / "mptrain_broken_factory.py").write_text("raise RuntimeError('no GPU here')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for spec_text in ("mptrain_broken_factory:make", f"{tmp_path}/mptrain_broken_factory.py:make"):
        with pytest.raises(UserError, match="RuntimeError: no GPU here"):
            load_data(spec_text)


def test_factory_files_with_the_same_name_in_different_folders(tmp_path):
    specs = []
    for folder, size in (("one", 3), ("two", 5)):
        (tmp_path / folder).mkdir()
        path = tmp_path / folder / "mptrain_same_stem_data.py"
        path.write_text("import torch\nfrom torch.utils.data import TensorDataset\n"
                        f"def make():\n    return TensorDataset(torch.zeros({size}, 1), "
                        f"torch.zeros({size}, dtype=torch.int64)), None\n")
        specs.append(f"{path}:make")
    try:
        assert len(load_data(specs[0]).train) == 3
        assert len(load_data(specs[1]).train) == 5
    finally:
        sys.modules.pop("mptrain_user_mptrain_same_stem_data", None)


@pytest.mark.parametrize("targets, expected", [
    (torch.tensor([0, 2, 1]), (CLASSIFICATION, 3)),
    (torch.tensor([5]), (CLASSIFICATION, 6)),
    (torch.tensor([0, 0], dtype=torch.int32), (CLASSIFICATION, 1)),
    (torch.tensor([0.5, 1.0]), (REGRESSION, 1)),
    (torch.zeros(4, 1), (REGRESSION, 1)),
    (torch.zeros(4, 3, dtype=torch.float64), (REGRESSION, 3)),
    (torch.zeros(4, 2, 3), (REGRESSION, 6)),
])
def test_infer_task(targets, expected):
    assert infer_task(targets) == expected


@pytest.mark.parametrize("targets, needle", [
    (torch.zeros(3, 2, dtype=torch.int64), "class indices of shape"),
    (torch.tensor([0, -1, 2]), "must be >= 0"),
])
def test_infer_task_refuses_bad_class_targets(targets, needle):
    with pytest.raises(UserError, match=needle):
        infer_task(targets)


@pytest.mark.parametrize("name", ["mnist", "digits-60k"])
def test_inputs_built_in_shared_memory_equal_private_ones(tmp_path, name):
    folder = None
    if name == "mnist":
        write_tiny_mnist(tmp_path)
        folder = str(tmp_path)
        shared, private = load_data(name, folder), load_data(name, folder)
    else:
        shared, private = digits_60k(300, 50), digits_60k(300, 50)
    shared.share_memory_()
    private.materialize_()
    assert shared.train.is_shared and shared.test.is_shared
    assert not private.train.inputs.is_shared()
    assert torch.equal(shared.train.inputs, private.train.inputs)
    assert torch.equal(shared.test.inputs, private.test.inputs)


# ---------------------------------------------------------------- a test set to score on

def pairs(inputs, targets):
    return TensorDataset(inputs, targets)


CLASSES = pairs(torch.randn(20, 4), torch.arange(20) % 3)


@pytest.mark.parametrize("test, needle", [
    (pairs(torch.randn(5, 4), torch.randn(5)),
     "the test data's targets are float (regression) but the training data's integer"),
    (pairs(torch.randn(5, 4), torch.tensor([0, 1, -1, 2, 0])),
     "the test data's targets: class targets must be >= 0"),
    (pairs(torch.randn(5, 4), torch.zeros(5, 2, dtype=torch.int64)),
     "the test data's targets: integer targets must be class indices"),
])
def test_a_test_set_the_model_cannot_be_scored_on_is_refused(test, needle):
    # Each was a traceback from the first evaluation, after a whole epoch of training.
    from mptrain.api import bundle_from_datasets

    with pytest.raises(UserError) as info:
        bundle_from_datasets(CLASSES, test)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_regression_test_targets_need_as_many_values_as_the_training_ones():
    from mptrain.api import bundle_from_datasets

    train = pairs(torch.randn(20, 4), torch.randn(20, 2))
    with pytest.raises(UserError, match="1 value.s. per sample but the training data's 2"):
        bundle_from_datasets(train, pairs(torch.randn(5, 4), torch.randn(5)))
    same = bundle_from_datasets(pairs(torch.randn(20, 4), torch.randn(20)),
                                pairs(torch.randn(5, 4), torch.randn(5, 1)))
    assert same.output_size == 1


@pytest.mark.parametrize("train_labels, test_labels, needle, distinct", [
    (torch.tensor([0, 1, 10**12, 1]), None,
     "class label 1,000,000,000,000 makes 1,000,000,000,001 classes", 3),
    # Only the test set's: the classes are those of both sets.
    (torch.tensor([0, 1, 2, 1]), torch.tensor([1, 10**12]),
     "the test data's targets: class label 1,000,000,000,000 makes", 2),
])
def test_a_huge_class_label_is_one_line_naming_it_and_the_classes(train_labels, test_labels,
                                                                  needle, distinct):
    """The model was built with one output per class 0..label: an allocation traceback
    (512 TB for the last layer) after the data had been read."""
    from mptrain.api import bundle_from_datasets

    test = None if test_labels is None else pairs(torch.randn(2, 4), test_labels)
    with pytest.raises(UserError) as info:
        bundle_from_datasets(pairs(torch.randn(4, 4), train_labels), test)
    text = str(info.value)
    assert needle in text and "\n" not in text
    assert "at most 1,000,000" in text and f"the {distinct} distinct labels" in text


def test_a_class_only_the_test_set_has_is_a_class_of_the_model():
    from mptrain.api import bundle_from_datasets

    bundle = bundle_from_datasets(CLASSES, pairs(torch.randn(5, 4), torch.arange(5)))
    assert bundle.output_size == 5
