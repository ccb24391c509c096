"""``--data hf:NAME``: a Hugging Face data set (the optional extra, ``pip install
'mptrain[hf]'``), by its Hub name -- read through ``datasets.load_dataset``, so the user's
cache and ``HF_DATASETS_OFFLINE`` apply as in any other program -- or a folder written by
``save_to_disk``.

Three columns matter: the client of each sample (``--client-column``), its input
(``--features``) and its label (``--label``). Flower's federated sets are known by name
(``flwrlabs/femnist``: writer_id, image, character; ``flwrlabs/shakespeare``: character_id,
x, y); otherwise the usual names are tried and a missing one is refused naming the columns
there are. Images become float tensors in [0, 1] through Pillow and numpy (no
torchvision); strings become LEAF's character indices; numbers stay numbers.

Rows are stored grouped by client (``clients.NaturalClients``), read in chunks of stored
order and written in place into shared memory. A set with no ``test`` split gets one per
client, as FedProx's generator splits: the rows after each client's first 90%.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from ...errors import UserError
from ..classes import class_count
from ..shared import SharedTensorDataset, shared_zeros
from ..shm_space import check_shm_space
from .clients import NaturalClients, NaturalData, group_rows
from .progress import loading_bar

#: Flower's federated data sets on the Hub: (client, features, label).
KNOWN_COLUMNS = {"flwrlabs/femnist": ("writer_id", "image", "character"),
                 "flwrlabs/shakespeare": ("character_id", "x", "y")}
_GUESSES = {"client_column": ("writer_id", "character_id", "client_id", "user_id", "client",
                              "user", "speaker_id"),
            "features": ("image", "img", "x", "features", "pixels", "text"),
            "label": ("label", "labels", "character", "y", "target", "fine_label")}
_CHUNK = 10_000
TRAIN_FRACTION = 0.9


def require_datasets():
    try:
        import datasets
    except ImportError:
        raise UserError("--data hf:NAME needs Hugging Face's datasets: pip install "
                        "'mptrain[hf]'") from None
    return datasets


def load_hf(name: str, client_column: str | None = None, features: str | None = None,
            label: str | None = None):
    """The bundle of ``hf:NAME`` (see the module's docstring)."""
    from .recipes import natural_recipe

    train, test = _open(name)
    said = {"client_column": client_column, "features": features, "label": label}
    columns = _columns(name, train.column_names, said)
    client_col, feature_col, label_col = (columns[k] for k in
                                          ("client_column", "features", "label"))
    train_keys = _column(train, client_col)
    missing = [row for row, key in enumerate(train_keys.tolist()) if key is None]
    if missing:   # np.unique cannot order None among the names: a TypeError
        raise UserError(f"--data hf:{name}: the client column {client_col!r} has no client for "
                        f"row {missing[0]} ({len(missing):,} rows in all); drop those rows or "
                        "give another --client-column")
    try:
        names, train_ids = np.unique(train_keys, return_inverse=True)
    except TypeError:   # ids of mixed kinds (numbers and strings): no order between them
        raise UserError(f"--data hf:{name}: the client column {client_col!r} mixes kinds of "
                        "values; give a column of one kind (names or numbers)") from None
    test_ids = None
    if test is not None:
        _columns(name, test.column_names, {k: columns[k] for k in columns}, "test")
        position = {key: i for i, key in enumerate(names.tolist())}
        test_ids = np.array([position.get(k, -1) for k in _column(test, client_col).tolist()],
                            dtype=np.int64)
    with loading_bar(f"reading {name}", len(train) + (len(test) if test is not None else 0),
                     unit="rows") as bar:
        first = _sample(train, feature_col, label_col, name)
        order, sizes = group_rows(train_ids, len(names))
        if test is None:   # each client's last 10% is its test split
            which, place, train_sizes, test_sizes = _held_out(order, sizes)
            train_set, test_set = _read(train, feature_col, label_col, first, bar, name,
                                        which, place, (int(train_sizes.sum()),
                                                       int(test_sizes.sum())))
        else:
            train_sizes = sizes
            test_order, test_sizes = group_rows(test_ids, len(names))
            train_set, = _read(train, feature_col, label_col, first, bar, name,
                               np.zeros(len(order), dtype=np.int64), _inverse(order),
                               (len(order),))
            test_set, = _read(test, feature_col, label_col, first, bar, name,
                              np.zeros(len(test_order), dtype=np.int64),
                              _inverse(test_order), (len(test_order),))
        if not len(test_set):
            test_set = None
    kind = first.kind
    clients = NaturalClients.from_sizes(train_sizes, test_sizes, [str(n) for n in names])
    output_size = first.classes or max(
        class_count(train_set.targets), class_count(test_set.targets) if test_set else 0)
    shape = tuple(train_set.inputs.shape[1:])
    return NaturalData(
        name=f"hf:{name}", train=train_set, test=test_set,
        output_size=output_size, default_model=_default_model(kind, shape),
        defaults=natural_recipe({"image": "femnist" if shape == (1, 28, 28) else None,
                                 "text": "shakespeare"}.get(kind), clients.count),
        clients=clients)


def _open(name: str):
    """(train split, test split or None) of a Hub name or a ``save_to_disk`` folder."""
    datasets = require_datasets()
    folder = Path(name).expanduser()
    try:
        if folder.is_dir():
            loaded = datasets.load_from_disk(str(folder))
        else:
            # Never a Hub set's loading script: a checkpoint may name the set, and
            # datasets before 3.0 ran scripts unless told (4.x has none and drops this).
            loaded = datasets.load_dataset(name, trust_remote_code=False)
    except FileNotFoundError as err:
        raise UserError(f"--data hf:{name}: {_first_line(err)}; give a Hub name "
                        "(flwrlabs/femnist) or a folder written by save_to_disk") from None
    except (ConnectionError, OSError, ValueError) as err:
        raise UserError(f"--data hf:{name} cannot be loaded: {_first_line(err)} (offline? "
                        "HF_DATASETS_OFFLINE=1 reads only what is in the cache)") from None
    if isinstance(loaded, datasets.Dataset):
        return loaded, None
    if "train" not in loaded:
        raise UserError(f"--data hf:{name} has no 'train' split (it has "
                        f"{', '.join(loaded)}); mptrain trains on 'train' and scores on "
                        "'test'")
    return loaded["train"], loaded["test"] if "test" in loaded else None


def _first_line(err: Exception) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


def _columns(name: str, present: list[str], said: dict, split: str = "train") -> dict:
    known = dict(zip(("client_column", "features", "label"), KNOWN_COLUMNS.get(name, ())))
    chosen = {}
    for key, flag in (("client_column", "--client-column"), ("features", "--features"),
                      ("label", "--label")):
        column = said.get(key) or known.get(key) or next(
            (c for c in _GUESSES[key] if c in present), None)
        if column is None:
            raise UserError(f"--data hf:{name}: which column is the {key.replace('_', ' ')}? "
                            f"give {flag} (its columns: {', '.join(present)})")
        if column not in present:
            raise UserError(f"--data hf:{name} has no column {column!r} in its {split} split "
                            f"({flag}); its columns: {', '.join(present)}")
        chosen[key] = column
    return chosen


def _column(split, column: str) -> np.ndarray:
    return np.asarray(list(split[column]))


class _First:
    """What the first sample says: the input's kind and shape, the dtype it is stored
    in, and the label's classes (a ClassLabel's count, LEAF's 80 characters, else None)."""

    def __init__(self, kind: str, shape: tuple, dtype: torch.dtype, classes: int | None):
        self.kind, self.shape, self.dtype, self.classes = kind, shape, dtype, classes


def _sample(split, feature_col: str, label_col: str, name: str) -> _First:
    from .leaf import LEAF_LETTERS

    if not len(split):
        raise UserError(f"--data hf:{name}: the train split is empty")
    value = split[0][feature_col]
    label_feature = split.features[label_col]
    classes = getattr(label_feature, "num_classes", None)
    if isinstance(value, str):
        return _First("text", (len(value),), torch.uint8, len(LEAF_LETTERS))
    if hasattr(value, "convert") and hasattr(value, "size"):   # a PIL image
        array = _image(value)
        kind, shape, dtype = "image", array.shape, torch.float32
    else:
        array = np.asarray(value, dtype=np.float32)
        kind, shape, dtype = "vector", array.shape, torch.float32
    first_label = split[0][label_col]
    if isinstance(first_label, str):
        model = "an image model" if kind == "image" else "mptrain"
        raise UserError(f"--data hf:{name}: the label column {label_col!r} holds strings "
                        f"({first_label!r}); {model} trains on class numbers: give a column "
                        "of class ids with --label")
    return _First(kind, tuple(shape), dtype, classes)


def _image(image) -> np.ndarray:
    """A PIL image as float32 [channels, height, width] in [0, 1]."""
    array = np.asarray(image, dtype=np.float32) / 255.0
    return array[None] if array.ndim == 2 else array.transpose(2, 0, 1)


def _read(split, feature_col: str, label_col: str, first: _First, bar, name: str,
          which: np.ndarray, place: np.ndarray, sizes: tuple[int, ...]):
    """Data sets of ``sizes`` rows in shared memory, stored row ``r`` written to row
    ``place[r]`` of set ``which[r]``, read ``_CHUNK`` rows at a time: each row is written
    once, where the workers will read it."""
    element = torch.empty(0, dtype=first.dtype).element_size()
    check_shm_space(sum(size * (math.prod(first.shape) * element + 8) for size in sizes),
                    what=f"--data hf:{name}")   # its pages are written as it is read
    outputs = [(shared_zeros((size, *first.shape), first.dtype),
                shared_zeros((size,), torch.int64)) for size in sizes]
    for start in range(0, len(split), _CHUNK):
        chunk = split[start:start + _CHUNK]
        inputs = torch.from_numpy(_inputs(chunk[feature_col], first, name))
        labels = torch.from_numpy(_labels(chunk[label_col], first, name))
        rows = slice(start, start + len(labels))
        for target, (out_inputs, out_targets) in enumerate(outputs):
            mine = torch.from_numpy(np.flatnonzero(which[rows] == target))
            where = torch.from_numpy(place[rows])[mine]
            out_inputs[where] = inputs[mine]
            out_targets[where] = labels[mine]
        bar.advance(len(labels))
    return [SharedTensorDataset(*output) for output in outputs]


def _inverse(order: np.ndarray) -> np.ndarray:
    """Where each row goes when rows are put in ``order``."""
    place = np.empty_like(order)
    place[order] = np.arange(len(order))
    return place


def _inputs(values, first: _First, name: str) -> np.ndarray:
    from .leaf import letter_indices

    where = f"--data hf:{name}"
    if first.kind == "text":
        return letter_indices(list(values), where, "the features")
    if first.kind == "image":
        arrays = [_image(v) for v in values]
    else:
        arrays = [np.asarray(v, dtype=np.float32) for v in values]
    if any(a.shape != first.shape for a in arrays):
        raise UserError(f"{where}: the inputs differ in shape (the first is {first.shape}); "
                        "mptrain stacks them into one tensor")
    return np.stack(arrays)


def _labels(values, first: _First, name: str) -> np.ndarray:
    from .leaf import letter_indices

    if first.kind == "text" and values and isinstance(values[0], str):
        return letter_indices(list(values), f"--data hf:{name}", "y")[:, 0].astype(np.int64)
    array = np.asarray(values)
    if array.dtype.kind == "f" and np.all(np.mod(array, 1) == 0):
        array = array.astype(np.int64)
    if array.dtype.kind not in "iu" or array.ndim != 1 or (len(array) and array.min() < 0):
        raise UserError(f"--data hf:{name}: the labels must be class numbers >= 0, got "
                        f"{array.dtype.name} values")
    return array.astype(np.int64)


def _held_out(order: np.ndarray, sizes: np.ndarray):
    """Per client (rows grouped by ``order``), the first 90% (at least one row) for
    training and the rest for its test split: each stored row's set (0 train, 1 test), its
    place there, and the clients' train and test sizes."""
    train_sizes = np.minimum(sizes, np.maximum(1, (TRAIN_FRACTION * sizes).astype(np.int64)))
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    within = np.arange(len(order)) - np.repeat(starts, sizes)
    to_test = (within >= np.repeat(train_sizes, sizes)).astype(np.int64)
    grouped_place = np.empty(len(order), dtype=np.int64)
    for target in (0, 1):   # places count up within each set, in grouped order
        mine = to_test == target
        grouped_place[mine] = np.arange(int(mine.sum()))
    which, place = np.empty_like(to_test), np.empty_like(grouped_place)
    which[order], place[order] = to_test, grouped_place
    return which, place, train_sizes, sizes - train_sizes


def _default_model(kind: str, shape: tuple) -> str:
    if kind == "text":
        return "leaf-shakespeare-lstm"
    if kind == "image" and shape == (1, 28, 28):
        return "leaf-femnist-cnn"
    if kind == "image" and len(shape) == 3 and shape[1:] == (32, 32):
        return "resnet18-gn"
    return "mclr"
