"""``--data leaf:DIR``: LEAF's three kinds read by shape, each user one client with its own
test split, and a broken folder refused in one line."""

import json

import numpy as np
import pytest
import torch

from leaf_files import (LETTERS, femnist_user, shakespeare_user, synthetic_user, write_file,
                        write_leaf)
from mptrain.data.natural import json_stream
from mptrain.data.sources import load_data
from mptrain.errors import UserError

pytestmark = pytest.mark.timeout(60)


def test_femnist_users_are_clients_with_their_rows_in_order(tmp_path):
    written = write_leaf(tmp_path, femnist_user)
    bundle = load_data(f"leaf:{tmp_path}")
    assert bundle.name == "leaf-femnist" and bundle.default_model == "leaf-femnist-cnn"
    assert bundle.output_size == 62 and bundle.train.inputs.shape == (48, 1, 28, 28)
    clients = bundle.clients
    assert clients.names == tuple(written["train"])
    assert clients.train_offsets.tolist() == list(range(0, 49, 8))
    assert clients.test_offsets.tolist() == list(range(0, 13, 2))
    for c, uid in enumerate(clients.names):   # client c's slice is that user's data, as written
        rows = slice(int(clients.train_offsets[c]), int(clients.train_offsets[c + 1]))
        expected = np.asarray(written["train"][uid]["x"], dtype=np.float32).reshape(-1, 1, 28, 28)
        assert np.array_equal(bundle.train.inputs[rows].numpy(), expected)
        assert bundle.train.targets[rows].tolist() == written["train"][uid]["y"]
        rows = slice(int(clients.test_offsets[c]), int(clients.test_offsets[c + 1]))
        assert bundle.test.targets[rows].tolist() == written["test"][uid]["y"]
    assert bundle.train.inputs.is_shared() and bundle.test.targets.is_shared()
    assert bundle.defaults.federated["partition"] == "natural"
    assert bundle.defaults.federated["clients"] == 6


def test_shakespeare_strings_become_leafs_character_indices(tmp_path):
    written = write_leaf(tmp_path, shakespeare_user, files=1)
    bundle = load_data(f"leaf:{tmp_path}")
    assert bundle.name == "leaf-shakespeare" and bundle.output_size == 80
    assert bundle.train.inputs.dtype == torch.uint8 and bundle.train.inputs.shape == (24, 80)
    first = written["train"][bundle.clients.names[0]]
    assert "".join(LETTERS[i] for i in bundle.train.inputs[0].tolist()) == first["x"][0]
    assert LETTERS[int(bundle.train.targets[0])] == first["y"][0]


def test_synthetic_vectors_with_float_labels(tmp_path):
    write_leaf(tmp_path, synthetic_user)
    bundle = load_data(f"leaf:{tmp_path}")
    assert bundle.name == "leaf-synthetic" and bundle.default_model == "mclr"
    assert bundle.train.inputs.shape == (48, 60) and bundle.train.targets.dtype == torch.int64
    assert bundle.output_size == 1 + max(int(bundle.train.targets.max()),
                                         int(bundle.test.targets.max()))


def test_a_huge_label_in_a_leaf_file_is_one_line(tmp_path):
    # Labels of LEAF's synthetic kind are the file's: 1e12 was a model of 1e12 outputs.
    rng = np.random.default_rng(3)
    user = synthetic_user(rng, 4)
    user["y"][1] = 1e12
    write_file(tmp_path / "train" / "t.json", {"u1": user})
    with pytest.raises(UserError, match="class label 1,000,000,000,000 makes"):
        load_data(f"leaf:{tmp_path}")


def test_user_data_before_the_lists_and_hierarchies_kept(tmp_path):
    rng = np.random.default_rng(1)
    users = {"b": synthetic_user(rng, 3), "a": synthetic_user(rng, 4)}
    write_file(tmp_path / "train" / "x.json", users, order=("user_data", "num_samples", "users"))
    write_file(tmp_path / "test" / "x.json", {"a": synthetic_user(rng, 1)},
               hierarchies=["play-a"])
    bundle = load_data(f"leaf:{tmp_path}")
    assert bundle.clients.names == ("b", "a")
    assert bundle.clients.train_sizes().tolist() == [3, 4]
    assert bundle.clients.test_sizes().tolist() == [0, 1]
    assert np.allclose(bundle.train.inputs[3:].numpy(), np.asarray(users["a"]["x"]))


def test_test_only_users_are_scored_but_own_no_client(tmp_path):
    # LEAF's user split (-t user): the test set has users of its own.
    rng = np.random.default_rng(2)
    write_file(tmp_path / "train" / "t.json", {"u1": synthetic_user(rng, 5)})
    write_file(tmp_path / "test" / "t.json", {"u9": synthetic_user(rng, 2),
                                               "u1": synthetic_user(rng, 1)})
    bundle = load_data(f"leaf:{tmp_path}")
    assert bundle.clients.count == 1 and len(bundle.test) == 3
    assert bundle.clients.test_offsets.tolist() == [0, 1]   # rows 1-2: u9, no client


def test_leading_lists_come_from_a_short_prefix(tmp_path, monkeypatch):
    write_leaf(tmp_path, femnist_user, files=1, users_per_file=2)
    path = next((tmp_path / "train").glob("*.json"))
    read = []
    original = path.__class__.open

    def counting_open(self, *args, **kwargs):
        handle = original(self, *args, **kwargs)
        real_read = handle.read
        handle.read = lambda *a: read.append(len(chunk := real_read(*a))) or chunk
        return handle

    monkeypatch.setattr(json_stream, "_FIRST_PREFIX", 64)
    monkeypatch.setattr(path.__class__, "open", counting_open)
    lists = json_stream.leading_lists(path)
    assert lists == {"users": ["f00_0", "f00_1"], "num_samples": [8, 8]}
    assert max(read) < path.stat().st_size / 10   # not the whole file


@pytest.mark.parametrize("breakage, needle", [
    ("no_train", "has no train/ folder"),
    ("no_folder", "no such folder"),
    ("missing_user", "is in 'users' and 'num_samples' but not in user_data"),
    ("extra_user", "is not in its 'users' list"),
    ("wrong_count", "num_samples says"),
    ("sent140", "mptrain reads FEMNIST"),
    ("bad_letter", "not in LEAF's 80-letter vocabulary"),
    ("not_json", "is not valid JSON"),
    ("femnist_class", "classes run from 0 to 61"),
])
def test_broken_folders_are_one_line(tmp_path, breakage, needle):
    rng = np.random.default_rng(3)
    root = tmp_path / "leaf"
    train = root / "train" / "d.json"
    if breakage == "no_train":
        (root / "test").mkdir(parents=True)
    elif breakage == "no_folder":
        pass
    elif breakage in ("missing_user", "extra_user", "wrong_count"):
        users = {"a": synthetic_user(rng, 2), "b": synthetic_user(rng, 2)}
        write_file(train, users)
        data = json.loads(train.read_text())
        if breakage == "missing_user":
            del data["user_data"]["b"]
        elif breakage == "extra_user":
            data["user_data"]["c"] = synthetic_user(rng, 1)
        else:
            data["num_samples"][0] = 5
        train.write_text(json.dumps(data))
    elif breakage == "sent140":
        write_file(train, {"a": {"x": [[1, "2009", "text"]], "y": [1]}})
    elif breakage == "bad_letter":
        write_file(train, {"a": {"x": ["ab\u00e9d"], "y": ["e"]}})
    elif breakage == "femnist_class":
        write_file(train, {"a": {"x": [[0.5] * 784], "y": [62]}})
    else:
        train.parent.mkdir(parents=True)
        train.write_text('{"users": ["a"], "num_samples": [1], "user_data": {"a": {"x": [[1')
    with pytest.raises(UserError, match=needle) as info:
        load_data(f"leaf:{root}")
    assert "\n" not in str(info.value)


def test_indented_json_and_an_empty_user_data_read_the_same(tmp_path):
    rng = np.random.default_rng(4)
    users = {"a": synthetic_user(rng, 2), "b": synthetic_user(rng, 3)}
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "1.json").write_text(json.dumps(
        {"users": list(users), "num_samples": [2, 3], "user_data": users}, indent=2))
    (tmp_path / "train" / "2.json").write_text(
        '{ "users" : [ ] , "num_samples" : [ ] , "user_data" : { } }\n')
    bundle = load_data(f"leaf:{tmp_path}")
    assert bundle.clients.names == ("a", "b") and bundle.test is None
    assert np.allclose(bundle.train.inputs.numpy(),
                       np.asarray(users["a"]["x"] + users["b"]["x"], dtype=np.float32))


@pytest.mark.parametrize("text, needle", [
    # A value nested past the decoder's recursion limit: RecursionError, a traceback.
    ('{"users": ["a"], "num_samples": [1], "user_data": {"a": {"x": ' + "[" * 100_000
     + "]" * 100_000 + ', "y": [0]}}}', "nested too deeply"),
    # hierarchies that are not a list: TypeError (len of an int), a traceback.
    ('{"users": ["a"], "num_samples": [1], "hierarchies": 5, "user_data": {"a": '
     '{"x": [[1.0, 2.0]], "y": [0]}}}', None),
])
def test_a_hostile_leaf_file_is_one_line_or_read(tmp_path, text, needle):
    train = tmp_path / "leaf" / "train" / "d.json"
    train.parent.mkdir(parents=True)
    train.write_text(text)
    if needle is None:
        assert load_data(f"leaf:{tmp_path / 'leaf'}").clients.hierarchies is None
        return
    with pytest.raises(UserError, match=needle) as info:
        load_data(f"leaf:{tmp_path / 'leaf'}")
    assert "\n" not in str(info.value)


def test_a_user_without_samples_is_a_client_without_rows(tmp_path):
    """num_samples 0 with empty x and y is LEAF's layout of a user with no rows; read first,
    it was refused ('x holds NoneType samples'; Shakespeare: 'y must be one character')."""
    rng = np.random.default_rng(0)
    for kind, user in (("synthetic", synthetic_user(rng, 3)),
                       ("shakespeare", shakespeare_user(rng, 3))):
        root = tmp_path / kind
        write_file(root / "train" / "d.json", {"empty": {"x": [], "y": []}, "full": user})
        bundle = load_data(f"leaf:{root}")
        assert len(bundle.train) == 3 and bundle.clients.count == 2


def test_a_folder_larger_than_dev_shm_is_refused_before_it_is_written(tmp_path, monkeypatch):
    """The arrays are made in shared memory as the folder is read, before the run's plan
    checks /dev/shm: a folder larger than it (Docker's 64 MB default: FEMNIST is 2.5 GB)
    died of SIGBUS as its pages were written. Each split is now checked as it is made."""
    import os

    rng = np.random.default_rng(0)
    write_file(tmp_path / "leaf" / "train" / "d.json", {"a": synthetic_user(rng, 40)})

    class Small:
        f_bavail, f_frsize, f_blocks = 2, 4096, 16   # 8 KiB free; the set is 9.9 KiB

    monkeypatch.setattr(os, "statvfs", lambda path: Small())
    with pytest.raises(UserError, match="needs .* of shared memory but /dev/shm has only") as info:
        load_data(f"leaf:{tmp_path / 'leaf'}")
    assert "\n" not in str(info.value)
