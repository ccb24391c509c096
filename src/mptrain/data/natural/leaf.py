"""``--data leaf:DIR``: LEAF's federated data sets (Caldas et al. 2018) as its preprocessing
writes them, ``DIR/train/*.json`` and ``DIR/test/*.json``, each user one client.

Which LEAF set a folder holds is read from its first sample: FEMNIST (784 floats: a 28x28
image, 62 classes), Shakespeare (strings of characters, the next character to predict, over
LEAF's 80-letter vocabulary) or Synthetic (float vectors, integer classes).

Loading is two passes. The first reads only each file's ``users`` and ``num_samples`` (a
few kB at the head of each file) and so knows every row's place; the arrays are then made
in shared memory at their final size, and the second pass decodes one user at a time
(``json_stream``) and writes its rows in place. The peak is the arrays, one file's text
and one user's Python objects -- not the whole folder as Python lists, nor a private copy
moved into shared memory afterwards (``benchmarks/leaf_load.py`` measures it).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ...errors import UserError
from ..classes import class_count
from ..shared import SharedTensorDataset, shared_zeros
from ..shm_space import check_shm_space
from .clients import NaturalClients, NaturalData
from .json_stream import leading_lists, read_text, walk
from .progress import loading_bar

#: LEAF's Shakespeare vocabulary (models/utils/language_utils.py ``ALL_LETTERS``): a
#: character's index here is its class and its embedding row.
LEAF_LETTERS = ("\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]"
                "abcdefghijklmnopqrstuvwxyz}")
FEMNIST_PIXELS = 784
FEMNIST_CLASSES = 62
_UNKNOWN = 255
_LETTER_INDEX = np.full(256, _UNKNOWN, dtype=np.uint8)
_LETTER_INDEX[np.frombuffer(LEAF_LETTERS.encode("ascii"), dtype=np.uint8)] = \
    np.arange(len(LEAF_LETTERS), dtype=np.uint8)


class _Rows:
    """Where each user's rows go in one split (train or test), from the leading lists."""

    def __init__(self, order: list[str], counts: dict[str, int]):
        self.start: dict[str, int] = {}
        at = 0
        for uid in order:
            self.start[uid] = at
            at += counts[uid]
        self.counts, self.total = counts, at
        self.inputs: torch.Tensor | None = None
        self.targets: torch.Tensor | None = None


def load_leaf(folder: str):
    """The bundle of a LEAF folder (see the module's docstring)."""
    from .recipes import natural_recipe

    root = Path(folder).expanduser()
    train_files = _json_files(root, "train", required=True)
    test_files = _json_files(root, "test", required=False)
    train_lists = [_lists_of(path) for path in train_files]
    test_lists = [_lists_of(path) for path in test_files]
    names, train_counts = _users_of(train_lists, train_files, "train")
    _, test_counts = _users_of(test_lists, test_files, "test")
    known = set(names)
    test_order = [u for u in names if u in test_counts] + \
        [u for u in test_counts if u not in known]   # test-only users: no training client
    train, test = _Rows(names, train_counts), _Rows(test_order, test_counts)
    total = sum(p.stat().st_size for p in train_files + test_files)
    kind = None
    with loading_bar(f"reading LEAF {root.name}", total) as bar:
        for split, files, lists in ((train, train_files, train_lists),
                                    (test, test_files, test_lists)):
            for path, entry in zip(files, lists):
                kind = _fill(path, split, kind, set(entry["users"]))
                bar.advance(path.stat().st_size)
    if train.inputs is None:
        raise UserError(f"--data leaf:{folder}: the training files hold no samples")
    if test.total and test.inputs is None:   # pragma: no cover - _fill allocates on use
        raise UserError(f"--data leaf:{folder}: the test files hold no samples")
    test_sizes = [test_counts.get(u, 0) for u in names] if test_files else None
    clients = NaturalClients.from_sizes([train_counts[u] for u in names], test_sizes, names,
                                        _hierarchies(train_lists))
    output_size = {"femnist": FEMNIST_CLASSES, "shakespeare": len(LEAF_LETTERS)}.get(kind)
    if output_size is None:
        output_size = max(class_count(train.targets),
                          class_count(test.targets) if test.total else 0)
    model = {"femnist": "leaf-femnist-cnn", "shakespeare": "leaf-shakespeare-lstm"}.get(
        kind, "mclr")
    return NaturalData(
        name=f"leaf-{kind}", train=SharedTensorDataset(train.inputs, train.targets),
        test=SharedTensorDataset(test.inputs, test.targets) if test.total else None,
        output_size=output_size, default_model=model,
        defaults=natural_recipe(kind, clients.count), clients=clients)


def _json_files(root: Path, split: str, required: bool) -> list[Path]:
    folder = root / split
    if not folder.is_dir():
        if not root.is_dir():
            raise UserError(f"--data leaf:{root}: no such folder; give the folder that holds "
                            "LEAF's train/ and test/ (e.g. leaf/data/femnist/data)")
        if required:
            raise UserError(f"--data leaf:{root} has no train/ folder; give the folder that "
                            "holds LEAF's train/ and test/ (e.g. leaf/data/femnist/data)")
        return []
    files = sorted(folder.glob("*.json"))
    if required and not files:
        raise UserError(f"--data leaf:{root}: {folder} holds no .json file; run LEAF's "
                        "preprocess.sh to write them")
    return files


def _lists_of(path: Path) -> dict:
    lists = leading_lists(path)
    users, counts = lists.get("users"), lists.get("num_samples")
    if not isinstance(users, list) or not isinstance(counts, list):
        raise UserError(f"LEAF file {path} has no 'users' and 'num_samples' lists; LEAF's "
                        "layout is {\"users\": [...], \"num_samples\": [...], "
                        "\"user_data\": {...}}")
    if len(users) != len(counts):
        raise UserError(f"LEAF file {path} lists {len(users)} users but {len(counts)} "
                        "num_samples; they must pair up")
    if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts):
        raise UserError(f"LEAF file {path}: num_samples must be whole numbers >= 0")
    hierarchies = lists.get("hierarchies")
    if not isinstance(hierarchies, list) or len(hierarchies) != len(users):
        hierarchies = None   # not one per user: not something to keep per client
    return {"users": [str(u) for u in users], "counts": counts, "hierarchies": hierarchies}


def _users_of(lists: list[dict], files: list[Path], split: str):
    order, counts = [], {}
    for path, entry in zip(files, lists):
        for uid, count in zip(entry["users"], entry["counts"]):
            if uid in counts:
                raise UserError(f"LEAF {split} file {path} lists user {uid!r}, already listed "
                                f"(in the same or an earlier {split} file); each user once")
            counts[uid] = count
            order.append(uid)
    return order, counts


def _hierarchies(lists: list[dict]):
    if not lists or any(entry["hierarchies"] is None for entry in lists):
        return None
    return tuple(h for entry in lists for h in entry["hierarchies"])


def _fill(path: Path, split: _Rows, kind: str | None, listed: set[str]) -> str | None:
    """Decode ``path`` user by user into ``split``'s arrays (made at the first user);
    ``listed``: the users its leading lists name."""
    for entry in walk(read_text(path), path):
        if entry[0] != "user":
            continue
        _, uid, value = entry
        if uid not in listed:
            raise UserError(f"LEAF file {path}: user {uid!r} has data in user_data but is "
                            "not in its 'users' list")
        x, y = _xy(value, uid, path)
        if x == [] and y == [] and split.counts[uid] == 0:   # a user without rows
            listed.discard(uid)
            continue
        kind = kind or _kind_of(x, uid, path)
        inputs, targets = _converted(kind, x, y, uid, path)
        if len(inputs) != split.counts[uid] or len(targets) != len(inputs):
            raise UserError(f"LEAF file {path}: user {uid!r} has {len(inputs)} x and "
                            f"{len(targets)} y but num_samples says {split.counts[uid]}")
        if split.inputs is None:   # its pages are written as the files are read
            check_shm_space(split.total * (inputs[0].nbytes + 8), what=f"LEAF {path.parent}")
            split.inputs = shared_zeros((split.total, *inputs.shape[1:]),
                                        torch.from_numpy(inputs).dtype)
            split.targets = shared_zeros((split.total,), torch.int64)
        if tuple(split.inputs.shape[1:]) != inputs.shape[1:]:
            raise UserError(f"LEAF file {path}: user {uid!r}'s samples have shape "
                            f"{inputs.shape[1:]}, the first user's {tuple(split.inputs.shape[1:])}")
        start = split.start[uid]
        split.inputs[start:start + len(inputs)] = torch.from_numpy(inputs)
        split.targets[start:start + len(inputs)] = torch.from_numpy(targets)
        listed.discard(uid)
    missing = [u for u in listed if split.counts.get(u)]
    if missing:
        raise UserError(f"LEAF file {path}: user {missing[0]!r} is in 'users' and "
                        "'num_samples' but not in user_data")
    return kind


def _xy(value, uid: str, path: Path):
    if not isinstance(value, dict) or "x" not in value or "y" not in value:
        raise UserError(f"LEAF file {path}: user {uid!r}'s data must be {{\"x\": [...], "
                        "\"y\": [...]}")
    return value["x"], value["y"]


def _kind_of(x, uid: str, path: Path) -> str:
    first = x[0] if isinstance(x, list) and x else None
    if isinstance(first, str):
        return "shakespeare"
    if isinstance(first, list) and first and all(_is_number(v) for v in first[:8]):
        return "femnist" if len(first) == FEMNIST_PIXELS else "synthetic"
    raise UserError(f"LEAF file {path}: user {uid!r}'s x holds {type(first).__name__} "
                    "samples; mptrain reads FEMNIST (784 floats), Shakespeare (strings) and "
                    "Synthetic (float vectors)")


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _converted(kind: str, x, y, uid: str, path: Path):
    where = f"LEAF file {path}: user {uid!r}"
    if kind == "shakespeare":
        labels = letter_indices(y, where, "y")[:, 0].astype(np.int64)
        return letter_indices(x, where, "x"), labels
    try:
        inputs = np.asarray(x, dtype=np.float32)
    except (TypeError, ValueError):
        raise UserError(f"{where}: x must be lists of numbers of one length") from None
    if inputs.ndim != 2 or (kind == "femnist" and inputs.shape[1] != FEMNIST_PIXELS):
        raise UserError(f"{where}: x must be lists of numbers of one length "
                        f"({'784' if kind == 'femnist' else 'as the first user'})")
    targets = _classes(y, where, FEMNIST_CLASSES if kind == "femnist" else None)
    if kind == "femnist":
        inputs = inputs.reshape(-1, 1, 28, 28)
    return inputs, targets


def _classes(y, where: str, classes: int | None) -> np.ndarray:
    values = np.asarray(y)
    if values.dtype.kind in "fc" and np.all(np.mod(values, 1) == 0):
        values = values.astype(np.int64)   # FedProx's generator writes 3.0 for class 3
    if values.dtype.kind not in "iu" or values.ndim != 1:
        raise UserError(f"{where}: y must be class numbers (whole numbers), got "
                        f"{values.dtype.name} values")
    if len(values) and (values.min() < 0 or (classes and values.max() >= classes)):
        top = f" to {classes - 1}" if classes else ""
        bad = int(values.min() if values.min() < 0 else values.max())
        raise UserError(f"{where}: y holds class {bad}; classes run from 0{top}")
    return values.astype(np.int64)


def letter_indices(strings, where: str, what: str) -> np.ndarray:
    """Strings of one length as rows of vocabulary indices (uint8: 1 byte a character,
    so the full Shakespeare set is 340 MB, not 2.7 GB of int64)."""
    if not all(isinstance(s, str) for s in strings):
        raise UserError(f"{where}: {what} must be strings of characters")
    width = len(strings[0]) if strings else 0
    if any(len(s) != width for s in strings) or (what == "y" and width != 1):
        want = "one character each" if what == "y" else "strings of one length"
        raise UserError(f"{where}: {what} must be {want}")
    try:
        raw = "".join(strings).encode("ascii")
    except UnicodeEncodeError as err:
        raise UserError(f"{where}: {what} holds {err.object[err.start]!r}, which is not in "
                        "LEAF's 80-letter vocabulary") from None
    indices = _LETTER_INDEX[np.frombuffer(raw, dtype=np.uint8)]
    if (indices == _UNKNOWN).any():
        bad = raw[int(np.flatnonzero(indices == _UNKNOWN)[0])]
        raise UserError(f"{where}: {what} holds {chr(bad)!r}, which is not in LEAF's "
                        "80-letter vocabulary")
    return indices.reshape(len(strings), max(width, 1) if strings else 0)
