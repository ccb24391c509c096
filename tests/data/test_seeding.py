"""The user's data built under --seed (mptrain.data.seeding): a factory that draws random
numbers gives the same data for the same seed -- the docs' own minimal example among them,
whose resume was not the run it continued (issue 57)."""

import copy
import random
import re
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset

import mptrain
from mptrain.cli import main
from mptrain.data.seeding import data_seed, seeded
from mptrain.data.sources import load_data

USAGE = Path(__file__).resolve().parents[2] / "docs" / "usage.md"

FACTORY = """
import random

import numpy as np
import torch
from torch.utils.data import TensorDataset

def make():
    x = torch.randn(40, 3) + float(np.random.rand()) + random.random()
    return TensorDataset(x, (x[:, 0] > 0).long()), None
"""


def run_cli(args):
    try:
        return main(args)
    except SystemExit as exit_:
        return exit_.code


@pytest.fixture
def factory(tmp_path, monkeypatch):
    path = tmp_path / "seeded_factory.py"
    path.write_text(FACTORY)
    yield f"{path}:make"
    for name in [n for n in sys.modules if n.startswith("mptrain_user_seeded_factory")]:
        sys.modules.pop(name)


def test_the_same_seed_gives_the_same_data_from_a_factory(factory):
    # The factory was called unseeded: two runs of one command trained on other data.
    first, again = load_data(factory, seed=3), load_data(factory, seed=3)
    assert torch.equal(first.train.inputs, again.train.inputs)
    other = load_data(factory, seed=4)
    assert not torch.equal(first.train.inputs, other.train.inputs)


def test_seeding_the_data_gives_the_callers_generators_back():
    torch.manual_seed(1), np.random.seed(1), random.seed(1)
    expected = (torch.rand(2), np.random.rand(), random.random())
    torch.manual_seed(1), np.random.seed(1), random.seed(1)
    with seeded(7):
        torch.rand(5), np.random.rand(3), random.random()
    assert torch.equal(torch.rand(2), expected[0])
    assert (np.random.rand(), random.random()) == expected[1:]


def test_the_data_is_drawn_apart_from_the_models_stream():
    # The model factory runs under torch.manual_seed(seed): data drawn from the same stream
    # would make the first weights out of the data's random numbers.
    with seeded(0):
        data = torch.rand(4)
    torch.manual_seed(0)
    assert not torch.equal(data, torch.rand(4))
    assert data_seed(0) != data_seed(1) and 0 <= data_seed(2**63 - 1) < 2**32


class Noisy(Dataset):
    """A __getitem__ that draws from the global generator (augmentation)."""

    def __len__(self):
        return 30

    def __getitem__(self, index):
        return torch.randn(3) + index, index % 2


def test_fit_stacks_a_random_getitem_under_its_seed():
    # The same model twice: only the stacked data can tell the two fits apart.
    model = torch.nn.Linear(3, 2)
    twin = copy.deepcopy(model)
    first = mptrain.fit(model, Noisy(), strategy="single", epochs=1, seed=5)
    again = mptrain.fit(twin, Noisy(), strategy="single", epochs=1, seed=5)
    assert first.epochs[0].train_loss == again.epochs[0].train_loss


def minimal_pair(folder: Path) -> None:
    """docs/usage.md's minimal pair as written, its two files in ``folder``."""
    text = USAGE.read_text(encoding="utf-8")
    block = re.search(r"A minimal pair[^`]*```python\n(.*?)```", text, re.S).group(1)
    for name, body in re.findall(r"^# (my_pkg/\w+\.py)\n(.*?)(?=^# my_pkg/|\Z)", block,
                                 re.S | re.M):
        path = folder / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(textwrap.dedent(body))
    (folder / "my_pkg" / "__init__.py").write_text("")


@pytest.fixture
def docs_example(tmp_path, monkeypatch):
    minimal_pair(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield ["--data", "my_pkg.data:make", "--model", "my_pkg.nets:make_model"]
    for name in [n for n in sys.modules if n == "my_pkg" or n.startswith("my_pkg.")]:
        sys.modules.pop(name)


def test_the_docs_minimal_pair_resumes_bitwise_identical(tmp_path, docs_example):
    # It gave 55.00% then 48.50% run twice, and its resume trained on other data than the
    # checkpoint's: docs/usage.md's "bitwise identical" did not hold for its own example.
    common = ["run", "--quiet", *docs_example, "--seed", "2"]
    part, whole, again = tmp_path / "part", tmp_path / "whole", tmp_path / "again"
    assert run_cli(common + ["--epochs", "1", "--checkpoint-every", "1",
                             "--out", str(part)]) == 0
    assert run_cli(["run", "--quiet", "--resume", str(part), *docs_example,
                    "--epochs", "2"]) == 0
    assert run_cli(common + ["--epochs", "2", "--out", str(whole)]) == 0
    assert run_cli(common + ["--epochs", "2", "--out", str(again)]) == 0
    resumed, straight = torch.load(part / "model.pt"), torch.load(whole / "model.pt")
    for key in straight:
        assert torch.equal(resumed[key], straight[key]), key
        assert torch.equal(torch.load(again / "model.pt")[key], straight[key]), key
