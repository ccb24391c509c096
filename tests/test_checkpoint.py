"""Checkpoints: atomic files, refusal of foreign or truncated ones, exact resume."""

import io
import json
import os
import signal
import subprocess
import sys
import threading

import pytest
import torch

from mptrain import checkpoint as checkpoints
from mptrain.cli import main
from mptrain.config import TrainConfig
from mptrain.errors import Interrupted, UserError
from mptrain.signals import stop_signals_deferred


def run_cli(args):
    try:
        return main(args)
    except SystemExit as exit_:
        return exit_.code


def read_metrics(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("strategy,workers", [("single", 1), ("sync", 2), ("ddp", 2)])
def test_interrupted_and_resumed_run_ends_bitwise_identical(tmp_path, strategy, workers):
    # 10 steps an epoch (of digits' 45 at batch 32) keep every epoch boundary, checkpoint and
    # resume of the full run at a fraction of its cost; the resumed run takes the
    # checkpoint's --steps-per-epoch.
    common = ["run", "--quiet", "--strategy", strategy, "--seed", "3", "--steps-per-epoch", "10"]
    if strategy != "single":
        common += ["--workers", str(workers)]
    part, whole = tmp_path / "part", tmp_path / "whole"
    assert run_cli(common + ["--epochs", "2", "--checkpoint-every", "1", "--out", str(part)]) == 0
    assert (part / "checkpoint.pt").is_file()
    assert run_cli(["run", "--quiet", "--resume", str(part), "--epochs", "3"]) == 0
    assert run_cli(common + ["--epochs", "3", "--out", str(whole)]) == 0

    resumed, straight = torch.load(part / "model.pt"), torch.load(whole / "model.pt")
    assert resumed.keys() == straight.keys()
    for key in resumed:
        assert torch.equal(resumed[key], straight[key]), key
    losses = [m["train_loss"] for m in read_metrics(part)]
    assert losses == [m["train_loss"] for m in read_metrics(whole)]
    assert len(losses) == 3


def test_checkpoint_has_what_a_resume_needs(tmp_path):
    out = tmp_path / "run"
    assert run_cli(["run", "--quiet", "--data", "linreg", "--epochs", "2",
                    "--checkpoint-every", "1", "--out", str(out)]) == 0
    loaded = checkpoints.load(out)
    assert loaded.epoch == 2 and loaded.world_size == 1 and loaded.strategy == "single"
    assert loaded.run["data"] == "linreg" and loaded.run["model"] == "linear"
    assert loaded.config["epochs"] == 2
    assert set(loaded.ranks[0]) == {"optimizer", "rng"}
    assert len(loaded.metrics) == 2
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temp files left


def test_truncated_checkpoint_is_refused(tmp_path):
    out = tmp_path / "run"
    assert run_cli(["run", "--quiet", "--data", "linreg", "--epochs", "1",
                    "--checkpoint-every", "1", "--out", str(out)]) == 0
    path = out / "checkpoint.pt"
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(UserError, match="not a readable mptrain checkpoint"):
        checkpoints.load(out)


def test_foreign_checkpoint_is_refused(tmp_path):
    torch.save({"state_dict": {"w": torch.zeros(2)}}, tmp_path / "checkpoint.pt")
    with pytest.raises(UserError, match="not an mptrain checkpoint"):
        checkpoints.load(tmp_path)


@pytest.mark.parametrize("content", [
    b"root:x:0:0:root:/root:/bin/bash\n",   # a text file (/etc/passwd): IndexError inside torch
    b"hello\n",                             # KeyError inside torch's unpickler
    b"\x80\x04K",                            # a pickle cut short: IndexError
    bytes(range(256)) * 8,                  # binary noise
    b"\x80\x04\x95\x00\x00\x00\x00\x00\x00\x00\x00]q\x00.",  # a plain pickle, not torch's
], ids=["text", "word", "cut-pickle", "noise", "pickle"])
def test_any_file_that_is_not_a_checkpoint_is_one_line_refusal(tmp_path, capsys, content):
    # Whatever torch's unpickler raises on a foreign file (IndexError, KeyError, ...), a
    # resume of it is a refusal, never a traceback; and never torch's advice to load it
    # with weights_only=False, which would run whatever the file holds.
    path = tmp_path / "notes.txt"
    path.write_bytes(content)
    with pytest.raises(UserError, match="not a readable mptrain checkpoint") as caught:
        checkpoints.load(path)
    message = str(caught.value)
    assert "\n" not in message and "weights_only" not in message
    assert run_cli(["run", "--resume", str(path)]) == 2
    assert "mptrain: error:" in capsys.readouterr().err


def test_checkpoint_never_unpickles_arbitrary_objects(tmp_path):
    marker = tmp_path / "executed"
    payload = (
        "import os, torch\n"
        "class Evil:\n"
        f"    def __reduce__(self): return (os.system, ('touch {marker}',))\n"
        f"torch.save({{'format': 'mptrain-checkpoint', 'x': Evil()}}, r'{tmp_path}/checkpoint.pt')\n")
    subprocess.run([sys.executable, "-c", payload], check=True)
    with pytest.raises(UserError):
        checkpoints.load(tmp_path)
    assert not marker.exists()


def test_missing_checkpoint_is_a_clear_error(tmp_path, capsys):
    assert run_cli(["run", "--resume", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mptrain: error: no checkpoint at") and "\n" not in err


def test_resume_with_other_worker_count_is_refused(tmp_path, capsys):
    out = tmp_path / "run"
    assert run_cli(["run", "--quiet", "--strategy", "sync", "--workers", "2", "--epochs", "1",
                    "--checkpoint-every", "1", "--out", str(out)]) == 0
    assert run_cli(["run", "--quiet", "--resume", str(out), "--workers", "3",
                    "--epochs", "2"]) == 2
    assert "resume with --workers 2" in capsys.readouterr().err


def test_checkpoint_every_needs_out(capsys):
    assert run_cli(["run", "--quiet", "--checkpoint-every", "1"]) == 2
    assert "--checkpoint-every needs --out" in capsys.readouterr().err


class _RankReport:
    """What a rank sends at the end of a round, as far as the keeper looks at it."""

    def __init__(self, rank: int, epoch: int):
        buffer = io.BytesIO()
        torch.save({"rank": rank, "model": {"w": torch.full((2,), float(epoch))}}, buffer)
        self.checkpoint = buffer.getvalue()


@pytest.fixture
def sigterm_raises():
    """SIGTERM raises Interrupted, as the command sets it up; and another thread runs, as
    torch's do in the command (the kernel may hand a signal to any thread that does not
    block it, and Python then runs the handler in the main thread all the same)."""
    def handler(signum, frame):
        raise Interrupted(signum)
    previous = signal.signal(signal.SIGTERM, handler)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    yield
    stop.set()
    other.join()
    signal.signal(signal.SIGTERM, previous)


def _sigterm_self() -> None:
    """Send this process SIGTERM and return once the kernel has handed it to a thread:
    Python's C-level handler writes to the wakeup fd when it runs, in whichever thread."""
    read, write = os.pipe()
    os.set_blocking(write, False)
    previous = signal.set_wakeup_fd(write)
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        os.read(read, 1)
    finally:
        signal.set_wakeup_fd(previous)
        os.close(read)
        os.close(write)


def _sigterm_self_around(monkeypatch, module, name, before: bool):
    """Make ``module.name`` send this process SIGTERM just before or just after it acts."""
    real = getattr(module, name)

    def call(*args, **kwargs):
        if before:
            _sigterm_self()
        result = real(*args, **kwargs)
        if not before:
            _sigterm_self()
        return result
    monkeypatch.setattr(module, name, call)


def test_a_stop_as_the_checkpoint_lands_still_records_it(tmp_path, monkeypatch, sigterm_raises):
    # CI saw "no checkpoint was written" with the file in place: SIGINT had arrived between
    # the rename and the keeper noting it.
    keeper = checkpoints.CheckpointKeeper(TrainConfig(checkpoint_every=1), {}, tmp_path, None)
    _sigterm_self_around(monkeypatch, os, "replace", before=False)
    with pytest.raises(Interrupted):
        keeper.offer(1, [_RankReport(0, 1)], [])
    assert keeper.saved_path == tmp_path / "checkpoint.pt" and keeper.saved_epoch == 1
    assert checkpoints.load(tmp_path).epoch == 1


def test_a_stop_while_a_checkpoint_is_written_names_the_one_on_disk(tmp_path, monkeypatch,
                                                                    sigterm_raises):
    keeper = checkpoints.CheckpointKeeper(TrainConfig(checkpoint_every=1), {}, tmp_path, None)
    keeper.offer(1, [_RankReport(0, 1)], [])
    second = [_RankReport(0, 2)]
    _sigterm_self_around(monkeypatch, torch, "save", before=True)
    with pytest.raises(Interrupted):
        keeper.offer(2, second, [])
    assert keeper.latest.epoch == 2  # in memory, for restarts
    assert keeper.saved_epoch == 1 and checkpoints.load(tmp_path).epoch == 1
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]  # no temp file left


def test_a_stop_deferred_around_a_failing_write_still_stops_the_run(sigterm_raises):
    with pytest.raises(Interrupted) as stopped:
        with stop_signals_deferred():
            _sigterm_self()
            raise OSError("disk full")
    assert isinstance(stopped.value.__context__, OSError)


def test_resuming_with_another_model_is_one_line(tmp_path, capsys):
    # It was torch's multi-line RuntimeError traceback from load_state_dict.
    out = tmp_path / "run"
    assert run_cli(["run", "--quiet", "--epochs", "1", "--steps-per-epoch", "2",
                    "--checkpoint-every", "1", "--out", str(out)]) == 0
    capsys.readouterr()
    before = {path.name: path.read_bytes() for path in out.iterdir()}
    assert run_cli(["run", "--resume", str(out), "--model", "mlp", "--epochs", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mptrain: error: the checkpoint's model does not fit") \
        and "--model digits-cnn" in err and "\n" not in err
    assert {path.name: path.read_bytes() for path in out.iterdir()} == before


@pytest.mark.parametrize("other, words", [
    (lambda: torch.nn.Linear(4, 3), "weight has shape (2, 4) in the checkpoint, (3, 4) here"),
    (lambda: torch.nn.Sequential(torch.nn.Linear(4, 2)),
     "2 of its tensors are not in this model (weight, bias)"),
])
def test_fit_resuming_with_another_model_is_refused(tmp_path, other, words):
    import mptrain
    from torch.utils.data import TensorDataset

    inputs = torch.randn(32, 4)
    data = TensorDataset(inputs, (inputs[:, 0] > 0).long())
    out = tmp_path / "run"
    mptrain.fit(torch.nn.Linear(4, 2), data, epochs=1, checkpoint_every=1, out=out)
    with pytest.raises(UserError) as caught:
        mptrain.fit(other(), data, epochs=2, resume=out)
    message = str(caught.value)
    assert words in message and "\n" not in message
    assert "pass fit() the model the checkpoint was trained with" in message


def rl_checkpoint() -> "checkpoints.Checkpoint":
    """What `mptrain rl --out DIR --checkpoint-every 1` leaves (its parts that matter here)."""
    return checkpoints.Checkpoint(epoch=1, strategy="a3c",
                                  config={"strategy": "a3c", "workers": 2, "steps": 2000},
                                  run={"env": "CartPole-v1", "net": None},
                                  model={"w": torch.zeros(2)}, ranks=[{}, {}], metrics=[{}])


def test_run_resuming_an_rl_checkpoint_is_told_to_use_mptrain_rl(tmp_path, capsys):
    # It said "strategy 'single' runs one process but --workers is 2".
    checkpoints.save(tmp_path, rl_checkpoint())
    assert run_cli(["run", "--resume", str(tmp_path), "--epochs", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("mptrain: error: the checkpoint was written by an RL run (algo a3c), not "
                   "a supervised one; resume it with mptrain rl --resume")


def test_fit_resuming_an_rl_checkpoint_is_told_to_use_rl_fit():
    import mptrain
    from torch.utils.data import TensorDataset

    inputs = torch.randn(16, 4)
    with pytest.raises(UserError, match=r"not a supervised one; resume it with "
                                        r"mptrain.rl.fit\(resume=...\)"):
        mptrain.fit(torch.nn.Linear(4, 2), TensorDataset(inputs, (inputs[:, 0] > 0).long()),
                    resume=rl_checkpoint())


def test_a_checkpoint_too_large_for_the_memory_left_is_not_called_corrupt(tmp_path,
                                                                        monkeypatch):
    path = tmp_path / checkpoints.FILENAME
    path.write_bytes(b"x" * 2**20)

    def out_of_memory(*args, **kwargs):
        raise MemoryError()

    monkeypatch.setattr(torch, "load", out_of_memory)
    with pytest.raises(UserError, match=r"^not enough memory to load .*checkpoint.pt \(1 MiB\); "
                                        "free memory or resume on a larger machine$"):
        checkpoints.load(tmp_path)


@pytest.mark.parametrize("partition,named_again", [
    ("dirichlet:0.3", False), ("shards:2", False), ("iid", False),
    ("my_pkg.split:clients", True), ("split.py:clients", True)])
def test_the_resume_hint_names_again_only_the_users_code(tmp_path, partition, named_again):
    # A fedavg run with --partition dirichlet:0.3 stopped by Ctrl-C said "resume with:
    # mptrain run --resume DIR --partition dirichlet:0.3": a built-in partition is in the
    # checkpoint; only code named by an import string or path must be named again.
    config = TrainConfig(strategy="fedavg", partition=partition, checkpoint_every=1)
    keeper = checkpoints.CheckpointKeeper(config, {"data": "digits", "model": "digits-cnn"},
                                          tmp_path, None)
    command = keeper.resume_command("mptrain run")
    assert command.startswith(f"mptrain run --resume {tmp_path}")
    assert ("--partition" in command) is named_again


def test_fit_resumes_a_built_in_partition_without_naming_it_again():
    # fit(resume=...) without partition= was refused ("the checkpoint names your code
    # partition 'dirichlet:0.3'"): the colon made the built-in look like an import string.
    stored = checkpoints.Checkpoint(epoch=1, strategy="fedavg",
                                    config={"partition": "dirichlet:0.3"}, run={}, model={},
                                    ranks=[], metrics=[])
    checkpoints.user_code_in(stored, {"partition": None})
    mine = checkpoints.Checkpoint(epoch=1, strategy="fedavg", config={"partition": "mine:split"},
                                  run={}, model={}, ranks=[], metrics=[])
    with pytest.raises(UserError, match="give partition 'mine:split' again|give --partition"):
        checkpoints.user_code_in(mine, {"partition": None})


@pytest.mark.parametrize("data", ["leaf:femnist", "hf:mnist", "synthetic:1,1"])
def test_natural_data_is_no_code_a_resume_must_name_again(data):
    # 'mptrain run --resume DIR' of a run on --data leaf:femnist (a folder of that name) or
    # hf:mnist (a Hub set) was refused: "the checkpoint names your code --data
    # 'leaf:femnist'", the colon taken for an import string's; load_data reads these as
    # data, never as a module, so the checkpoint may name them.
    stored = checkpoints.Checkpoint(epoch=1, strategy="fedavg", config={}, run={"data": data},
                                    model={}, ranks=[], metrics=[])
    checkpoints.user_code_in(stored, {"data": None})
    assert checkpoints.user_code_flags({"data": data}) == []
    from mptrain.data.sources import NATURAL_PREFIXES, is_natural

    assert is_natural(data) and data.startswith(NATURAL_PREFIXES)


@pytest.mark.parametrize("function", ["__main__:<lambda>", "notebook:make.<locals>.split",
                                      "__main__:<lambda>@train.py:12",
                                      "__main__:make.<locals>.<lambda>@/tmp/ipykernel_7/3.py:2"])
def test_a_lambda_partition_must_be_given_again(function):
    # fit(partition=lambda ...) records '__main__:<lambda>'; its '<lambda>' is no
    # identifier, so a resume took it from the checkpoint and ran the function registered
    # last under that name in the process -- another lambda's cut of the clients, without a
    # word. A function's name is the user's code however it is spelled.
    stored = checkpoints.Checkpoint(epoch=1, strategy="fedavg", config={"partition": function},
                                    run={}, model={}, ranks=[], metrics=[])
    with pytest.raises(UserError, match="give .*partition.* again"):
        checkpoints.user_code_in(stored, {"partition": None})
    checkpoints.user_code_in(stored, {"partition": function})
    # Another lambda, elsewhere: the name says where, so the resume is refused.
    with pytest.raises(UserError, match="resume with the same"):
        checkpoints.user_code_in(stored, {"partition": "__main__:<lambda>@train.py:40"})


def test_a_stop_while_a_checkpoint_loads_is_the_stop_not_a_foreign_file(tmp_path, monkeypatch):
    # Any failure of torch.load is a foreign or damaged file, in one line; a Ctrl-C whose
    # exception a cleanup replaced read "not a readable mptrain checkpoint" instead.
    path = tmp_path / checkpoints.FILENAME
    path.write_bytes(b"whatever")

    def cut_short(*args, **kwargs):
        try:
            raise Interrupted(signal.SIGTERM)
        finally:
            raise RuntimeError("the reader's cleanup, cut short")

    monkeypatch.setattr(torch, "load", cut_short)
    with pytest.raises(Interrupted):
        checkpoints.load(tmp_path)
