"""The UCI handwritten digits that ship inside scikit-learn, read straight from the package.

``sklearn.datasets.load_digits`` costs over a second of imports (scipy, sklearn.utils) for
a 60 kB file; reading the file with numpy keeps ``mptrain run`` start-up short. The file's
rows are 64 pixel values (0-16) followed by the label.
"""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import numpy as np


def load_uci_digits() -> tuple[np.ndarray, np.ndarray]:
    """Images as float32 [1797, 8, 8] with values 0..16, labels as int64 [1797]."""
    path = _digits_file()
    if path is None:  # an unusual scikit-learn layout: take the slow, official way
        from sklearn.datasets import load_digits

        raw = load_digits()
        return raw.images.astype(np.float32), raw.target.astype(np.int64)
    with gzip.open(path, "rt") as handle:
        table = np.loadtxt(handle, delimiter=",", dtype=np.float32)
    return table[:, :64].reshape(-1, 8, 8), table[:, 64].astype(np.int64)


def _digits_file() -> Path | None:
    spec = importlib.util.find_spec("sklearn")  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("scikit-learn is not installed; it ships the embedded digits: "
                          "pip install scikit-learn")
    path = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data" / \
        "digits.csv.gz"
    return path if path.is_file() else None
