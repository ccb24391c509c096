"""mptrain.runner: a new run into the --out of an earlier one is refused before anything is
written (issue 57: a 1-epoch run replaced a 5-epoch run's metrics.jsonl and checkpoint.pt),
for `mptrain run`, `mptrain rl` and fit(); --overwrite, a resume of that run, an empty folder
go on."""

import json

import pytest
import torch
import torch.nn as nn
from torch.utils.data import TensorDataset

import mptrain
from mptrain.cli import main
from mptrain.errors import UserError


def run_cli(args):
    try:
        return main(args)
    except SystemExit as exit_:
        return exit_.code


def metrics_rows(out):
    return (out / "metrics.jsonl").read_text().splitlines()


def test_a_second_run_into_the_out_of_a_finished_one_is_refused(tmp_path, capsys):
    out = tmp_path / "a"
    common = ["run", "--quiet", "--data", "linreg", "--out", str(out)]
    assert run_cli(common + ["--epochs", "2", "--checkpoint-every", "1"]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    assert run_cli(common + ["--epochs", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"mptrain: error: {out} holds a finished 2-epoch run (summary.json, "
                   "metrics.jsonl, model.pt, curves.png, checkpoint.pt); --resume "
                   f"{out} to continue it, --overwrite to replace it, or another --out")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before   # nothing written
    assert run_cli(["run", "--quiet", "--resume", str(out), "--epochs", "3"]) == 0
    assert len(metrics_rows(out)) == 3
    assert run_cli(common + ["--epochs", "1", "--overwrite"]) == 0
    assert len(metrics_rows(out)) == 1


def test_overwrite_from_a_config_file(tmp_path):
    out = tmp_path / "a"
    assert run_cli(["run", "--quiet", "--data", "linreg", "--epochs", "1", "--out",
                    str(out)]) == 0
    config = tmp_path / "run.toml"
    config.write_text(f'data = "linreg"\nepochs = 2\nout = "{out}"\noverwrite = true\n')
    assert run_cli(["run", "--quiet", "--config", str(config)]) == 0
    assert len(metrics_rows(out)) == 2


def test_a_resume_into_the_out_of_another_run_is_refused(tmp_path, capsys):
    first, other = tmp_path / "a", tmp_path / "b"
    common = ["run", "--quiet", "--data", "linreg"]
    assert run_cli(common + ["--epochs", "1", "--checkpoint-every", "1", "--out",
                             str(first)]) == 0
    assert run_cli(common + ["--epochs", "1", "--out", str(other)]) == 0
    capsys.readouterr()
    assert run_cli(["run", "--quiet", "--resume", str(first), "--epochs", "2", "--out",
                    str(other)]) == 2
    assert f"{other} holds a finished 1-epoch run" in capsys.readouterr().err


def classified():
    x = torch.randn(32, 4, generator=torch.Generator().manual_seed(0))
    return TensorDataset(x, (x[:, 0] > 0).long())


def test_fit_refuses_another_runs_out_unless_told_to_overwrite(tmp_path):
    (tmp_path / ".mptrain.lock").write_text("")   # a folder with the lock file only is free
    mptrain.fit(nn.Linear(4, 2), classified(), out=tmp_path, epochs=2)
    with pytest.raises(UserError) as caught:
        mptrain.fit(nn.Linear(4, 2), classified(), out=tmp_path, epochs=1)
    assert str(caught.value).startswith(f"{tmp_path} holds a finished 2-epoch run")
    assert str(caught.value).endswith("overwrite=True to replace it, or another out")
    mptrain.fit(nn.Linear(4, 2), classified(), out=tmp_path, epochs=1, overwrite=True)
    assert json.loads((tmp_path / "summary.json").read_text())["rounds_done"] == 1


def test_mptrain_rl_refuses_another_runs_out(tmp_path, capsys):
    pytest.importorskip("gymnasium")
    common = ["rl", "--quiet", "--algo", "dqn", "--workers", "1", "--steps", "200",
              "--round-steps", "200", "--learning-starts", "100", "--eval-episodes", "1",
              "--out", str(tmp_path)]
    assert run_cli(common) == 0
    capsys.readouterr()
    assert run_cli(common) == 2
    assert f"{tmp_path} holds a finished 1-round run" in capsys.readouterr().err
    assert run_cli(common + ["--overwrite"]) == 0


def test_overwrite_leaves_none_of_the_earlier_runs_outputs(tmp_path, capsys):
    """--overwrite replaces the earlier run's outputs, not only those the new run writes
    again: its checkpoint.pt (kept by --checkpoint-every, which the new run lacks) stayed,
    and '--resume runs/a' then resumed the earlier run beside the new one's metrics; the
    closing line named it among the new run's outputs."""
    out = tmp_path / "a"
    common = ["run", "--quiet", "--data", "linreg", "--out", str(out)]
    assert run_cli(common + ["--epochs", "2", "--checkpoint-every", "1"]) == 0
    (out / "notes.txt").write_text("mine")   # the user's own file stays
    # A killed federated run's scratch state (7.4 GiB for 10,000 Ditto clients) went too.
    (out / "personal-state.f32").write_bytes(b"rows")
    assert run_cli(common + ["--epochs", "1", "--overwrite"]) == 0
    assert not (out / "checkpoint.pt").exists()
    assert not (out / "personal-state.f32").exists()
    assert (out / "notes.txt").read_text() == "mine"
    assert len(metrics_rows(out)) == 1
