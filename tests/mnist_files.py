"""Tiny MNIST-shaped IDX files written by tests (nothing is downloaded)."""

import gzip

import numpy as np

_TYPE_CODES = {"u1": 0x08, "i1": 0x09, "i2": 0x0B, "i4": 0x0C, "f4": 0x0D, "f8": 0x0E}


def idx_bytes(array, type_code=None):
    """Encode ``array`` as IDX; ``type_code`` overrides the code derived from its dtype."""
    array = np.asarray(array)
    code = _TYPE_CODES[array.dtype.str[1:]] if type_code is None else type_code
    header = bytes([0, 0, code, array.ndim]) + b"".join(d.to_bytes(4, "big") for d in array.shape)
    return header + array.astype(array.dtype.newbyteorder(">")).tobytes()


def write(path, data, gz=False):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def write_mnist(root, n_train=5, n_test=3, sep="-", gz=True, sub="."):
    """Write a tiny MNIST-shaped data set; returns the folder the files went into."""
    rng = np.random.default_rng(0)
    folder = root / sub
    ext = ".gz" if gz else ""
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        labels = rng.integers(0, 10, size=n, dtype=np.uint8)
        write(folder / f"{prefix}-images{sep}idx3-ubyte{ext}", idx_bytes(images), gz)
        write(folder / f"{prefix}-labels{sep}idx1-ubyte{ext}", idx_bytes(labels), gz)
    return folder
