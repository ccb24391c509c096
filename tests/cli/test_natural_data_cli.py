"""Natural clients from the command line: `mptrain run --data leaf:DIR --strategy fedavg`
trains one client per LEAF user, synthetic:A,B makes --clients devices, a config file names
them too, and mistakes are one line, exit 2."""

import json

import pytest

from leaf_files import femnist_user, synthetic_user, write_leaf
from mptrain.cli import main
from user_errors import fail

pytestmark = pytest.mark.timeout(120)

FAST = ["run", "--strategy", "fedavg", "--workers", "2", "--threads-per-worker", "1",
        "--rounds", "1", "--local-epochs", "1", "--clients-per-round", "2"]


def test_leaf_users_train_as_natural_clients(tmp_path, capsys):
    write_leaf(tmp_path / "leaf", synthetic_user)
    out = tmp_path / "out"
    assert main([*FAST, "--data", f"leaf:{tmp_path / 'leaf'}", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "6 clients (natural)" in printed and "model mclr" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["clients"] == 6 and summary["partition"] == "natural"


def test_a_config_file_names_the_data_and_the_pooled_data_can_be_cut(tmp_path, capsys):
    write_leaf(tmp_path / "leaf", synthetic_user)
    config = tmp_path / "run.toml"
    config.write_text(f'data = "leaf:{tmp_path / "leaf"}"\npartition = "iid"\nclients = 4\n')
    assert main([*FAST, "--config", str(config)]) == 0
    assert "4 clients (iid)" in capsys.readouterr().out


def test_synthetic_makes_clients_devices(capsys):
    assert main([*FAST, "--data", "synthetic:1,1", "--clients", "12", "--quiet"]) == 0
    assert main(["partitions", "--data", "synthetic:1,1", "--clients", "12"]) == 0
    out = capsys.readouterr().out
    assert "12 clients · partition natural" in out and "size Gini" in out
    assert "Hellinger distance to pooled labels" in out


def test_partitions_of_a_leaf_folder_default_to_its_users(tmp_path, capsys):
    write_leaf(tmp_path, femnist_user, files=1, users_per_file=3)
    assert main(["partitions", "--data", f"leaf:{tmp_path}"]) == 0
    out = capsys.readouterr().out
    assert "3 clients · partition natural" in out and "label heterogeneity" in out


@pytest.mark.parametrize("make, flags, needle", [
    (None, ["--data", "leaf:{root}"], "has no train/ folder"),
    ("leaf", ["--data", "leaf:{root}", "--clients", "5"],
     "--clients 5, but leaf-synthetic has 6 natural clients"),
    (None, ["--data", "digits", "--partition", "natural"], "natural needs data that names"),
    (None, ["--data", "digits", "--client-column", "w"], "name the columns of --data hf:NAME"),
    # Natural data with columns of its own (LEAF's, FedProx's): the flags were ignored.
    ("leaf", ["--data", "leaf:{root}", "--label", "y"], "name the columns of --data hf:NAME"),
    (None, ["--data", "synthetic:1,1", "--features", "x"], "name the columns of --data hf:NAME"),
    (None, ["--data", "synthetic:1"], "synthetic:ALPHA,BETA"),
    (None, ["--data", "synthetic:1e308,1"], "from 0 to 1e6"),
    (None, ["--data", "synthetic-iid:3"], "synthetic-iid takes no parameters"),
])
def test_mistakes_are_one_line(tmp_path, capsys, make, flags, needle):
    root = tmp_path / "leaf"
    (root / "test").mkdir(parents=True)
    if make:
        write_leaf(root, synthetic_user)
    assert needle in fail([*FAST, *[f.format(root=root) for f in flags]], capsys)
