"""``--data hf:NAME`` on small data sets the tests write with ``save_to_disk`` (skipped
without Hugging Face's ``datasets``): clients from a column, images through Pillow, LEAF's
characters, a per-client test split, and wrong columns refused in one line."""

import numpy as np
import pytest
import torch

from mptrain.data.sources import load_data
from mptrain.errors import UserError

datasets = pytest.importorskip("datasets")
Image = pytest.importorskip("PIL.Image")
pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def femnist_folder(tmp_path):
    """flwrlabs/femnist's columns (image, writer_id, character), one split (train)."""
    rng = np.random.default_rng(0)
    pixels = (rng.random((30, 28, 28)) * 255).astype(np.uint8)
    writers = [f"w{i % 4}" for i in range(30)]
    labels = rng.integers(0, 62, 30).tolist()
    table = datasets.Dataset.from_dict(
        {"image": [Image.fromarray(p) for p in pixels], "writer_id": writers,
         "character": labels},
        features=datasets.Features({"image": datasets.Image(),
                                    "writer_id": datasets.Value("string"),
                                    "character": datasets.ClassLabel(num_classes=62)}))
    table.save_to_disk(str(tmp_path / "femnist"))
    return tmp_path / "femnist", pixels, writers, labels


def test_images_grouped_by_writer_with_each_writers_last_tenth_for_test(femnist_folder):
    folder, pixels, writers, labels = femnist_folder
    bundle = load_data(f"hf:{folder}", client_column="writer_id", features="image",
                       label="character")
    clients = bundle.clients
    assert clients.names == ("w0", "w1", "w2", "w3")
    assert clients.train_sizes().tolist() == [7, 7, 6, 6]   # 8, 8, 7, 7 rows: 90% each
    assert clients.test_sizes().tolist() == [1, 1, 1, 1]
    assert bundle.train.inputs.shape == (26, 1, 28, 28) and bundle.output_size == 62
    assert bundle.default_model == "leaf-femnist-cnn"
    w1 = [i for i, w in enumerate(writers) if w == "w1"]
    start = int(clients.train_offsets[1])
    assert torch.allclose(bundle.train.inputs[start, 0], torch.from_numpy(pixels[w1[0]]) / 255)
    assert bundle.train.targets[start] == labels[w1[0]]
    assert bundle.test.targets[int(clients.test_offsets[1])] == labels[w1[-1]]
    assert bundle.train.inputs.is_shared()


def test_shakespeare_columns_known_without_flags_and_its_own_test_split(tmp_path,
                                                                          monkeypatch):
    from mptrain.data.natural import hf

    train = datasets.Dataset.from_dict({"character_id": ["b", "a", "b"],
                                        "x": ["abcd", "bcde", "cdef"], "y": ["e", "f", "g"]})
    test = datasets.Dataset.from_dict({"character_id": ["a", "z"], "x": ["abcd", "zzzz"],
                                       "y": ["e", "f"]})
    datasets.DatasetDict({"train": train, "test": test}).save_to_disk(str(tmp_path / "s"))
    monkeypatch.setitem(hf.KNOWN_COLUMNS, str(tmp_path / "s"), ("character_id", "x", "y"))
    bundle = load_data(f"hf:{tmp_path / 's'}")
    assert bundle.clients.names == ("a", "b") and bundle.output_size == 80
    assert bundle.train.inputs.dtype == torch.uint8
    assert bundle.clients.test_offsets.tolist() == [0, 1, 1]   # 'z' has no training client
    assert bundle.default_model == "leaf-shakespeare-lstm"


@pytest.mark.parametrize("columns, needle", [
    ({"label": "nope"}, "has no column 'nope'"),
    ({"client_column": "character"}, None),
])
def test_a_column_that_is_not_there(femnist_folder, columns, needle):
    folder = femnist_folder[0]
    if needle is None:
        load_data(f"hf:{folder}", **columns)   # any column may name the clients
        return
    with pytest.raises(UserError, match=needle):
        load_data(f"hf:{folder}", **columns)


def test_string_labels_with_images_are_refused(tmp_path):
    table = datasets.Dataset.from_dict({"image": [Image.fromarray(np.zeros((4, 4), np.uint8))],
                                        "writer_id": ["a"], "label": ["cat"]})
    table.save_to_disk(str(tmp_path / "cats"))
    with pytest.raises(UserError, match="an image model trains on class numbers"):
        load_data(f"hf:{tmp_path / 'cats'}")


def test_an_unknown_name_offline_is_one_line(monkeypatch):
    """datasets and huggingface_hub read HF_*_OFFLINE when imported (this module's import):
    the variables alone left the load asking the Hub, 20 s of timeouts without a network."""
    import huggingface_hub.constants

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(UserError) as info:
        load_data("hf:nobody/no-such-set-mptrain")
    assert "\n" not in str(info.value) and "OfflineModeIsEnabled" in str(info.value)


def test_a_config_file_names_the_columns(femnist_folder, tmp_path, capsys):
    from mptrain.cli import main

    folder = femnist_folder[0]
    config = tmp_path / "run.toml"
    config.write_text(f'data = "hf:{folder}"\nclient-column = "writer_id"\n'
                      'features = "image"\nlabel = "character"\nmodel = "mclr"\n')
    # One thread: a forked worker, not the fork server's (seconds that prove nothing here).
    assert main(["run", "--config", str(config), "--strategy", "fedavg", "--workers", "1",
                 "--threads-per-worker", "1", "--rounds", "1", "--local-epochs", "1",
                 "--clients-per-round", "2"]) == 0
    assert "4 clients (natural)" in capsys.readouterr().out


def test_a_hub_set_never_runs_its_loading_script(monkeypatch):
    """datasets before 3.0 ran a Hub set's loading script unless told not to (2.14 and 2.15,
    which the extra accepted, without asking): --data hf:NAME, which a checkpoint may name,
    would then run code. The load says trust_remote_code=False (4.x drops it quietly)."""
    asked = {}

    def recording(name, **options):
        asked.update(options, name=name)
        raise FileNotFoundError(f"no {name}")

    monkeypatch.setattr(datasets, "load_dataset", recording)
    with pytest.raises(UserError):
        load_data("hf:someone/scripted")
    assert asked == {"name": "someone/scripted", "trust_remote_code": False}


def test_a_client_column_with_a_missing_value_is_one_line(tmp_path):
    # np.unique of ['a', None, 'b'] raised TypeError ('<' between NoneType and str).
    datasets.Dataset.from_dict({"writer_id": ["a", None, "b"], "x": [[1.0], [2.0], [3.0]],
                                "y": [0, 1, 0]}).save_to_disk(str(tmp_path / "gaps"))
    with pytest.raises(UserError, match="client column 'writer_id' has no client for row 1"):
        load_data(f"hf:{tmp_path / 'gaps'}", features="x", label="y")
