"""What a checkpoint records of its data (mptrain.data.fingerprint), and the resume that
trains on other data, refused in one line (issue 57: it went on without a word)."""

import copy

import pytest
import torch
from torch.utils.data import TensorDataset

import mptrain
from mptrain import checkpoint as checkpoints
from mptrain.data.fingerprint import difference, fingerprint
from mptrain.data.shared import RowSource, SharedTensorDataset
from mptrain.data.sources import DataBundle, load_data
from mptrain.errors import UserError


def bundle(inputs, targets, test=None):
    return DataBundle(name="t", train=SharedTensorDataset(inputs, targets), test=test,
                      task="classification", output_size=2, default_model="mlp",
                      defaults=None)


def test_the_same_data_has_the_same_fingerprint_and_any_change_is_named():
    x, y = torch.arange(12.0).reshape(6, 2), torch.tensor([0, 1, 0, 1, 0, 1])
    recorded = fingerprint(bundle(x, y))
    assert difference(recorded, fingerprint(bundle(x.clone(), y.clone()))) is None
    changed = x.clone()
    changed[5, 1] += 1e-6
    assert difference(recorded, fingerprint(bundle(changed, y))) == \
        "the training inputs hold other values (same shape and dtype)"
    assert difference(recorded, fingerprint(bundle(x[:5], y[:5]))) == \
        "the training inputs have shape (5, 2), the checkpoint's (6, 2)"
    assert difference(recorded, fingerprint(bundle(x.double(), y))) == \
        "the training inputs are float64, the checkpoint's float32"
    assert difference(recorded, fingerprint(bundle(x, 1 - y))).startswith(
        "the training targets hold other values")
    with_test = fingerprint(bundle(x, y, SharedTensorDataset(x, y)))
    assert difference(recorded, with_test) == \
        "the checkpoint's run had no test data, this one has some"


def test_rows_computed_on_demand_have_the_fingerprint_of_the_built_tensor():
    # The built-ins (MNIST) are rows computed where they will live: their fingerprint is
    # taken without building them, and must not change once they are built.
    source = RowSource((25_000, 3), torch.float32,
                       lambda out, start: out.copy_(torch.arange(start, start + len(out))
                                                    .unsqueeze(1).expand(-1, 3) * 0.5))
    targets = torch.zeros(25_000, dtype=torch.int64)
    lazy = fingerprint(bundle(source, targets))
    built = fingerprint(bundle(source.materialize(shared=False), targets))
    assert lazy == built


def classified(n=64, seed=0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    return TensorDataset(x, (x[:, 0] > 0).long())


def test_a_fit_resumed_on_other_data_is_refused_in_one_line(tmp_path):
    model = torch.nn.Linear(4, 2)
    mptrain.fit(copy.deepcopy(model), classified(), strategy="single", epochs=1,
                batch_size=16, out=tmp_path, checkpoint_every=1)
    assert checkpoints.load(tmp_path).data["train"]["inputs"]["shape"] == [64, 4]
    with pytest.raises(UserError) as caught:
        mptrain.fit(copy.deepcopy(model), classified(seed=1), resume=tmp_path, epochs=2)
    message = str(caught.value)
    assert message.startswith("this is not the data the checkpoint was trained on: the "
                              "training inputs hold other values")
    assert "pass fit() the data the run was trained on" in message and "\n" not in message
    resumed = mptrain.fit(copy.deepcopy(model), classified(), resume=tmp_path, epochs=2)
    assert len(resumed.epochs) == 2


def test_a_checkpoint_written_before_fingerprints_still_resumes(tmp_path):
    model = torch.nn.Linear(4, 2)
    mptrain.fit(copy.deepcopy(model), classified(), strategy="single", epochs=1,
                batch_size=16, out=tmp_path, checkpoint_every=1)
    old = checkpoints.load(tmp_path).as_dict()
    del old["data"]   # what a checkpoint of the code before this change holds
    torch.save(old, tmp_path / "checkpoint.pt")
    assert checkpoints.load(tmp_path).data is None
    resumed = mptrain.fit(copy.deepcopy(model), classified(seed=1), resume=tmp_path, epochs=2)
    assert len(resumed.epochs) == 2


def test_mptrain_run_resumed_under_another_seed_is_told_the_runs_seed(tmp_path, capsys):
    from mptrain.cli import main

    factory = tmp_path / "drawn.py"
    factory.write_text("import torch\nfrom torch.utils.data import TensorDataset\n"
                       "def make():\n    x = torch.randn(60, 4)\n"
                       "    return TensorDataset(x, (x[:, 0] > 0).long()), None\n")
    data = ["--data", f"{factory}:make"]

    def run(args):
        try:
            return main(["run", "--quiet", *data, *args])
        except SystemExit as exit_:
            return exit_.code

    out = tmp_path / "run"
    assert run(["--epochs", "1", "--checkpoint-every", "1", "--out", str(out)]) == 0
    capsys.readouterr()
    assert run(["--resume", str(out), "--epochs", "2", "--seed", "4"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("mptrain: error: this is not the data the checkpoint was trained on: the "
                   "training inputs hold other values (same shape and dtype); its run built "
                   "the data under --seed 0, this one under 4: resume with --seed 0, or "
                   "start a new run")
    assert run(["--resume", str(out), "--epochs", "2"]) == 0


def test_the_fingerprint_reads_every_dtype_as_bytes():
    # bfloat16 and bool have no numpy view of their own.
    recorded = fingerprint(load_data("digits"))
    assert set(recorded) == {"train", "test"}
    assert recorded["train"]["inputs"]["dtype"] == "float32"
    odd = fingerprint(bundle(torch.zeros(3, 2, dtype=torch.bfloat16),
                             torch.ones(3, dtype=torch.bool)))
    assert odd["train"]["inputs"]["dtype"] == "bfloat16"
    assert odd["train"]["targets"]["dtype"] == "bool"


@pytest.mark.parametrize("recorded", [{"train": "x"}, {"train": {"inputs": 3}},
                                      {"train": {"inputs": {"shape": [64, 4]}, "targets": []}}])
def test_a_damaged_fingerprint_is_a_damaged_checkpoint_in_one_line(tmp_path, recorded):
    """The fingerprint is read from the file like every other part: a malformed one ended
    the resume in AttributeError ('str' object has no attribute 'get')."""
    model = torch.nn.Linear(4, 2)
    mptrain.fit(copy.deepcopy(model), classified(), strategy="single", epochs=1,
                batch_size=16, out=tmp_path, checkpoint_every=1)
    damaged = checkpoints.load(tmp_path).as_dict()
    damaged["data"] = recorded
    torch.save(damaged, tmp_path / "checkpoint.pt")
    with pytest.raises(UserError, match="is damaged: its 'data'"):
        mptrain.fit(copy.deepcopy(model), classified(), resume=tmp_path, epochs=2)


def test_a_checkpoint_recording_no_training_data_is_compared_not_crashed_on():
    """``well_formed`` lets a set be None: the loader check must read such a record too."""
    from mptrain.data.fingerprint import loader_difference

    now = fingerprint(bundle(torch.zeros(2, 2), torch.tensor([0, 1])))
    recorded = {"train": None, "test": None}
    assert loader_difference(recorded, now) is None
    assert "had no training data" in difference(recorded, now)
