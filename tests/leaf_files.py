"""Small LEAF folders written the way LEAF's preprocessing writes them (``{"users",
"num_samples", "user_data"}`` per file, train/ and test/), for the readers' tests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

LETTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"


def femnist_user(rng, count):
    return {"x": rng.random((count, 784)).round(4).tolist(),
            "y": rng.integers(0, 62, count).tolist()}


def shakespeare_user(rng, count, width=80):
    picks = rng.integers(0, len(LETTERS), (count, width + 1))
    lines = ["".join(LETTERS[i] for i in row) for row in picks]
    return {"x": [line[:width] for line in lines], "y": [line[width] for line in lines]}


def synthetic_user(rng, count, features=60):
    # FedProx's generator writes the labels as floats (3.0).
    return {"x": rng.normal(size=(count, features)).tolist(),
            "y": [float(v) for v in rng.integers(0, 10, count)]}


def write_file(path: Path, users: dict, order=("users", "num_samples", "user_data"),
               hierarchies=None) -> None:
    """One LEAF file of ``users`` (uid -> {"x", "y"}), its keys in ``order``."""
    entries = {"users": list(users), "num_samples": [len(u["y"]) for u in users.values()],
               "user_data": users}
    if hierarchies is not None:
        entries["hierarchies"] = hierarchies
        order = ("users", "hierarchies", *order[1:]) if "hierarchies" not in order else order
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({key: entries[key] for key in order}))


def write_leaf(root: Path, make_user, files=2, users_per_file=3, train=8, test=2,
               seed=0) -> dict:
    """A LEAF folder: ``files`` train and test files of ``users_per_file`` users each, of
    ``train`` and ``test`` samples; returns {split: {uid: data}} to compare with."""
    rng = np.random.default_rng(seed)
    written = {"train": {}, "test": {}}
    for index in range(files):
        uids = [f"f{index:02d}_{u}" for u in range(users_per_file)]
        for split, count in (("train", train), ("test", test)):
            users = {uid: make_user(rng, count) for uid in uids}
            write_file(root / split / f"all_data_{index}_{split}.json", users)
            written[split].update(users)
    return written
