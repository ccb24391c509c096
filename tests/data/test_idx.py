"""Tests for mptrain.data.idx: tiny IDX files are written into tmp_path, never downloaded."""

import gzip
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from mnist_files import idx_bytes, write, write_mnist
from mptrain.data.idx import find_mnist_files, load_mnist, read_idx
from mptrain.errors import UserError

REAL_MNIST = Path(__file__).resolve().parents[3] / "shared" / "data" / "mnist"


@pytest.mark.parametrize("gz", [False, True], ids=["raw", "gz"])
@pytest.mark.parametrize("array", [
    np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4),
    np.array([-1.5, 0.0, 3.25, 1e30], dtype=np.float32),
    np.array([[-300, 7], [32767, -32768]], dtype=np.int16),
], ids=["uint8", "float32", "int16"])
def test_read_idx_round_trips(tmp_path, array, gz):
    # A ".gz" name on a raw file (and vice versa) must not matter: detection is by content.
    path = write(tmp_path / "data.idx.gz", idx_bytes(array), gz)
    result = read_idx(path)
    assert result.dtype == array.dtype.newbyteorder("=") and result.dtype.isnative
    assert result.flags.writeable
    np.testing.assert_array_equal(result, array)


@pytest.mark.parametrize("name, content, needle", [
    ("empty", b"", "too short"),
    ("bad-magic", b"\x12\x34\x08\x01" + b"\0\0\0\x01" + b"\x05", "bad magic number 0x12340801"),
    ("unknown-type", b"\0\0\x0f\x01" + b"\0\0\0\x01" + b"\x05", "bad magic number 0x00000F01"),
    ("short-dims", b"\0\0\x08\x03" + b"\0\0\0\x02", "truncated IDX header"),
    ("truncated", idx_bytes(np.zeros((4, 5), np.uint8))[:-3], "needs 20 bytes but found 17"),
    ("trailing", idx_bytes(np.zeros((4, 5), np.uint8)) + b"xyz", "3 trailing bytes"),
    ("corrupt-gz", b"\x1f\x8b" + b"not really gzip at all", "corrupt gzip"),
    ("truncated-gz", gzip.compress(idx_bytes(np.zeros(100, np.uint8)), mtime=0)[:-10], "corrupt gzip"),
])
def test_read_idx_rejects_bad_files(tmp_path, name, content, needle):
    path = write(tmp_path / f"{name}-idx1-ubyte", content)
    with pytest.raises(UserError, match=needle) as info:
        read_idx(path)
    assert str(path) in str(info.value)
    assert "\n" not in str(info.value)


def test_read_idx_missing_file(tmp_path):
    path = tmp_path / "nope-idx1-ubyte"
    with pytest.raises(UserError, match="not found") as info:
        read_idx(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("sep, gz, sub", [
    ("-", True, "."),
    (".", False, "."),
    ("-", False, "MNIST/raw"),
    (".", True, "mnist"),
], ids=["dash-gz", "dot-raw", "MNIST-raw", "mnist-subdir"])
def test_find_and_load_mnist_layouts(tmp_path, sep, gz, sub):
    folder = write_mnist(tmp_path, sep=sep, gz=gz, sub=sub)
    paths = find_mnist_files(tmp_path)
    assert set(paths) == {"train_images", "train_labels", "test_images", "test_labels"}
    assert all(p.parent == folder and p.is_file() for p in paths.values())
    train_x, train_y, test_x, test_y = load_mnist(tmp_path)
    assert (train_x.shape, train_y.shape, test_x.shape, test_y.shape) == ((5, 28, 28), (5,), (3, 28, 28), (3,))
    assert train_x.dtype == np.uint8 and train_y.dtype == np.int64 and test_y.dtype == np.int64


def test_missing_data_dir(tmp_path):
    path = tmp_path / "no-such-dir"
    for func in (find_mnist_files, load_mnist):
        with pytest.raises(UserError, match="does not exist") as info:
            func(path)
        assert str(path) in str(info.value)


def test_missing_files_are_listed(tmp_path):
    write_mnist(tmp_path)
    (tmp_path / "t10k-labels-idx1-ubyte.gz").unlink()
    (tmp_path / "train-images-idx3-ubyte.gz").unlink()
    with pytest.raises(UserError) as info:
        load_mnist(tmp_path)
    message = str(info.value)
    assert "test_labels" in message and "t10k-labels-idx1-ubyte" in message and "t10k-labels.idx1-ubyte" in message
    assert "train_images" in message and "train-images-idx3-ubyte" in message
    assert "test_images" not in message and "\n" not in message


@pytest.mark.parametrize("name, array, needle", [
    ("train-labels-idx1-ubyte.gz", np.zeros(4, np.uint8), "count mismatch: 5 images in .* but 4 labels in"),
    ("t10k-labels-idx1-ubyte.gz", np.array([0, 10, 3], np.uint8), "label 10 out of range"),
    ("train-images-idx3-ubyte.gz", np.zeros((5, 784), np.uint8), "magic number 0x00000802 .*image"),
    ("t10k-labels-idx1-ubyte.gz", np.zeros((3, 1), np.uint8), "magic number 0x00000802 .*label"),
    ("train-labels-idx1-ubyte.gz", np.zeros(5, np.int32), "magic number 0x00000C01"),
], ids=["count-mismatch", "label-range", "images-2d", "labels-2d", "labels-int32"])
def test_load_mnist_rejects_mismatched_files(tmp_path, name, array, needle):
    write_mnist(tmp_path)
    write(tmp_path / name, idx_bytes(array), gz=True)
    with pytest.raises(UserError, match=needle) as info:
        load_mnist(tmp_path)
    assert name in str(info.value)


def test_real_mnist_if_present():
    if not REAL_MNIST.is_dir():
        pytest.skip(f"{REAL_MNIST} not present")
    train_x, train_y, test_x, test_y = load_mnist(REAL_MNIST)
    assert train_x.shape == (60000, 28, 28) and train_y.shape == (60000,)
    assert test_x.shape == (10000, 28, 28) and test_y.shape == (10000,)
    counts = np.bincount(test_y, minlength=10).tolist()
    assert counts == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


def test_read_ahead_hands_over_the_same_arrays_and_leaves_no_thread(tmp_path):
    import threading

    from mptrain.data import idx

    folder = write_mnist(tmp_path, n_train=7, n_test=4)
    expected = load_mnist(folder)
    idx.read_ahead(folder)
    try:
        ahead = load_mnist(folder)
    finally:
        idx.finish_read_ahead()
    for got, want in zip(ahead, expected):
        np.testing.assert_array_equal(got, want)
        assert got.dtype == want.dtype and got.flags.writeable
    assert not [t for t in threading.enumerate() if t.name == "mptrain-read-mnist"]
    assert idx._read_ahead is None


def test_read_ahead_reports_a_bad_file_as_the_plain_read_does(tmp_path):
    from mptrain.data import idx

    folder = write_mnist(tmp_path)
    write(folder / "t10k-labels-idx1-ubyte.gz", idx_bytes(np.zeros(3, np.uint8)) + b"x", True)
    with pytest.raises(UserError) as plain:
        load_mnist(folder)
    idx.read_ahead(folder)
    try:
        with pytest.raises(UserError) as ahead:
            load_mnist(folder)
    finally:
        idx.finish_read_ahead()
    assert str(ahead.value) == str(plain.value) and "trailing bytes" in str(plain.value)


def test_read_ahead_of_a_missing_folder_leaves_the_error_to_the_loader(tmp_path):
    from mptrain.data import idx

    idx.read_ahead(tmp_path / "absent")
    try:
        with pytest.raises(UserError, match="does not exist"):
            load_mnist(tmp_path / "absent")
    finally:
        idx.finish_read_ahead()


def _gzip_bomb(path, header: bytes, zeros: int):
    """A gzip file of ``header`` then ``zeros`` zero bytes, written a MiB at a time."""
    with gzip.open(path, "wb") as stream:
        stream.write(header)
        chunk = bytes(1 << 20)
        for _ in range(zeros >> 20):
            stream.write(chunk)
    return path


@pytest.mark.parametrize("header, needle", [
    (bytes([0, 0, 8, 1]) + (10).to_bytes(4, "big"), "trailing bytes"),   # declares 10 bytes
    (b"\x12\x34\x08\x01", "bad magic number"),                            # not IDX at all
], ids=["small-shape", "bad-magic"])
def test_a_gzip_bomb_is_refused_after_inflating_at_most_its_declared_size(tmp_path, header,
                                                                          needle):
    path = _gzip_bomb(tmp_path / "bomb-idx1-ubyte.gz", header, zeros=128 << 20)
    assert path.stat().st_size < 1 << 20          # 128 MiB of zeros in a few hundred KB
    tracemalloc.start()
    try:
        with pytest.raises(UserError, match=needle) as info:
            read_idx(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"{peak / 2**20:.0f} MiB allocated to read it"
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("ndim, dims, data", [
    (4, [1 << 16] * 4, b""),          # 2**64 bytes: 0 in int64, so "no data" looked right
    (3, [0xFFFFFFFF] * 3, b"\x01"),
    (9, [1] * 9, b"\x01"),
], ids=["product-wraps-to-zero", "huge", "too-many-dims"])
@pytest.mark.parametrize("gz", [False, True], ids=["raw", "gz"])
def test_headers_declaring_impossible_sizes_are_one_line_errors(tmp_path, ndim, dims, data,
                                                                gz):
    header = bytes([0, 0, 8, ndim]) + b"".join(d.to_bytes(4, "big") for d in dims)
    path = write(tmp_path / "huge-idx1-ubyte", header + data, gz)
    with pytest.raises(UserError, match="beyond the 8 dims") as info:
        read_idx(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)
