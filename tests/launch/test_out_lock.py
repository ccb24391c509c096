"""One run at a time per --out folder (``launch.out_lock``): a second run into a folder a
live run writes is refused in one line; the folder is free again when the run ends, or when
its holder died without cleaning up."""

import os

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import mptrain
from mptrain.callbacks import Callback
from mptrain.errors import UserError
from mptrain.launch.out_lock import LOCK_NAME, out_dir_held


def small_data():
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(64, 4, generator=generator)
    return TensorDataset(inputs, (inputs.sum(dim=1) > 0).long())


class SecondRunInto(Callback):
    """At the first round's end, starts a second run into the same folder: what a user
    does by running the same command twice."""

    def __init__(self, out):
        self.out, self.refusal = out, None

    def on_round_end(self, row):
        if self.refusal is None:
            try:
                mptrain.fit(nn.Linear(4, 2), small_data(), out=self.out, epochs=1)
                self.refusal = "ran"
            except UserError as err:
                self.refusal = str(err)


def test_a_second_run_into_a_live_runs_out_is_refused(tmp_path):
    out = tmp_path / "run"
    second = SecondRunInto(out)
    mptrain.fit(nn.Linear(4, 2), small_data(), out=out, epochs=2, callbacks=[second])
    assert second.refusal is not None and second.refusal != "ran"
    assert f"out {out} is being written by another mptrain run (pid {os.getpid()})" \
        in second.refusal and "\n" not in second.refusal
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 2   # the first run's
    assert not (out / LOCK_NAME).exists()
    # Free once it ended; its outputs are replaced only when asked (issue 57).
    mptrain.fit(nn.Linear(4, 2), small_data(), out=out, epochs=1, overwrite=True)


def test_the_folder_is_free_after_a_refusal_and_after_an_error(tmp_path):
    with out_dir_held(tmp_path):
        with pytest.raises(UserError, match="being written by another mptrain run"):
            with out_dir_held(tmp_path):
                pass
    with pytest.raises(RuntimeError):
        with out_dir_held(tmp_path):
            raise RuntimeError("the run failed")
    with out_dir_held(tmp_path):
        pass
    assert list(tmp_path.iterdir()) == []


def test_a_lock_file_left_by_a_killed_run_holds_nothing(tmp_path):
    # SIGKILL leaves the file; the kernel already dropped the lock with the process.
    (tmp_path / LOCK_NAME).write_text("999999\n")
    with out_dir_held(tmp_path):
        assert (tmp_path / LOCK_NAME).read_text() == f"{os.getpid()}\n"
    assert not (tmp_path / LOCK_NAME).exists()
