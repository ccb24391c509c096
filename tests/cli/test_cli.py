"""Tests for the command line, run in-process: ``main([...])`` as the ``mptrain`` script does.

Training runs are kept to a couple of epochs of the small built-in data sets.
"""

import json
import os
import stat
import subprocess
import sys

import psutil
import pytest
import torch

import mptrain.api
from mptrain.cli import main
from user_errors import fail

pytestmark = pytest.mark.timeout(60)

SUMMARY_KEYS = {"strategy", "workers", "epochs", "data", "model", "test_mse", "final_train_loss",
                "train_samples_per_s", "wall_s", "torch", "cores", "seed", "weight", "bias"}
TIME_FIELDS = {"samples_per_s", "epoch_s", "minor_faults", "elapsed_s"}
OUTPUTS = {"summary.json", "metrics.jsonl", "model.pt", "curves.png"}


def metric_rows(folder):
    lines = (folder / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def without_time(rows):
    return [{k: v for k, v in row.items() if k not in TIME_FIELDS and not k.startswith("time_")}
            for row in rows]


@pytest.fixture(scope="module")
def linreg_run(tmp_path_factory):
    """One default-length linreg run with --out, shared by the output checks."""
    out = tmp_path_factory.mktemp("linreg") / "out"
    assert main(["run", "--data", "linreg", "--out", str(out), "--quiet"]) == 0
    return out


def test_default_run_returns_zero(capsys):
    assert main(["run", "--quiet", "--epochs", "1"]) == 0
    out, err = capsys.readouterr()
    assert out == "" and err == ""


def test_run_prints_progress_unless_quiet(capsys):
    assert main(["run", "--data", "linreg", "--epochs", "2"]) == 0
    out, err = capsys.readouterr()
    assert "strategy single" in out and "data linreg" in out
    assert "epoch 1/2" in out and "epoch 2/2" in out
    assert "done" in out and "learned y =" in out
    assert err == ""


def test_linreg_summary(linreg_run):
    summary = json.loads((linreg_run / "summary.json").read_text())
    assert SUMMARY_KEYS <= set(summary)
    assert (summary["strategy"], summary["workers"], summary["data"], summary["model"]) == \
        ("single", 1, "linreg", "linear")
    assert summary["epochs"] == 100 and summary["seed"] == 0
    assert summary["torch"] == torch.__version__
    assert summary["cores"] >= 1 and summary["wall_s"] > 0 and summary["train_samples_per_s"] > 0
    assert abs(summary["weight"] - 2) < 0.2
    assert abs(summary["bias"] - 3) < 0.5
    assert summary["test_mse"] < 2
    assert summary["final_train_loss"] < 2


def test_linreg_metrics_has_one_line_per_epoch(linreg_run):
    rows = metric_rows(linreg_run)
    assert [row["epoch"] for row in rows] == list(range(1, 101))
    assert all(row["test_mse"] is not None and row["test_accuracy"] is None for row in rows)
    summary = json.loads((linreg_run / "summary.json").read_text())
    assert rows[-1]["test_mse"] == summary["test_mse"]


def test_linreg_model_and_curves(linreg_run):
    state = torch.load(linreg_run / "model.pt", weights_only=True)
    assert set(state) == {"weight", "bias"}
    summary = json.loads((linreg_run / "summary.json").read_text())
    assert state["weight"].item() == pytest.approx(summary["weight"])
    assert state["bias"].item() == pytest.approx(summary["bias"])
    assert (linreg_run / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_out_holds_only_the_outputs(linreg_run):
    names = {p.name for p in linreg_run.iterdir()}
    assert names == OUTPUTS
    assert not [name for name in names if name.startswith(".")]


def test_outputs_follow_the_umask(tmp_path):
    # Outputs are written to temp files (mkstemp: mode 0600) and renamed into place; they
    # must still be readable by others like any file the user writes.
    old = os.umask(0o022)
    try:
        assert main(["run", "--data", "linreg", "--epochs", "1", "--quiet",
                     "--out", str(tmp_path / "out")]) == 0
    finally:
        os.umask(old)
    for name in OUTPUTS:
        assert stat.S_IMODE((tmp_path / "out" / name).stat().st_mode) == 0o644, name


def test_linreg_run_prints_nothing_on_stderr(tmp_path):
    # A fresh interpreter: torch issues this warning once per process.
    done = subprocess.run([sys.executable, "-m", "mptrain", "run", "--data", "linreg",
                           "--epochs", "1", "--quiet"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=50)
    assert done.returncode == 0
    assert done.stderr == ""


def test_same_seed_gives_the_same_run(tmp_path):
    for name, unrelated in (("a", 123), ("b", 456)):
        torch.manual_seed(unrelated)  # whatever else the process did with the global RNG
        # 10 steps an epoch: two epochs of the default run, at a fraction of their cost.
        assert main(["run", "--seed", "1", "--epochs", "2", "--steps-per-epoch", "10",
                     "--quiet", "--out", str(tmp_path / name)]) == 0
    first, second = metric_rows(tmp_path / "a"), metric_rows(tmp_path / "b")
    assert [row["epoch"] for row in first] == [1, 2]
    assert without_time(first) == without_time(second)
    first_state = torch.load(tmp_path / "a" / "model.pt", weights_only=True)
    second_state = torch.load(tmp_path / "b" / "model.pt", weights_only=True)
    assert first_state.keys() == second_state.keys()
    assert all(torch.equal(first_state[k], second_state[k]) for k in first_state)


def test_flags_override_the_config_file(tmp_path):
    config = tmp_path / "run.toml"
    config.write_text('data = "linreg"\nepochs = 2\nlr = 0.01\n')
    out = tmp_path / "out"
    assert main(["run", "--config", str(config), "--epochs", "1", "--quiet",
                 "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["data"], summary["epochs"], summary["lr"]) == ("linreg", 1, 0.01)
    assert len(metric_rows(out)) == 1


@pytest.fixture
def captured_run(monkeypatch):
    """Replace training by a recorder of what the CLI hands over."""
    calls = []

    def record(request):
        calls.append({"config": request.config, "data": request.family.data.name,
                      "model": request.family.model_name, "out": request.out})

    monkeypatch.setattr(mptrain.api, "run", record)
    return calls


@pytest.mark.parametrize("file_text, flags, expected", [
    ("", [], {"strategy": "single", "quiet": False, "epochs": 10, "share_optimizer_state": False,
              "data": "digits", "model": "digits-cnn", "out": None}),
    ('[run]\nquiet = true\nstrategy = "hogwild"\nshare-optimizer-state = true\nworkers = 3\n'
     'data = "linreg"\nmodel = "mlp"\nout = "from-file"\n',
     [], {"quiet": True, "strategy": "hogwild", "share_optimizer_state": True, "workers": 3,
          "data": "linreg", "model": "mlp", "out": "from-file"}),
    ('quiet = true\nstrategy = "hogwild"\nshare_optimizer_state = true\nworkers = 3\n'
     'data = "linreg"\nout = "from-file"\nbatch-size = 7\n',
     ["--strategy", "sync", "--no-share-optimizer-state", "--workers", "4", "--data", "digits",
      "--out", "from-flag"],
     {"quiet": True, "strategy": "sync", "share_optimizer_state": False, "workers": 4,
      "data": "digits", "model": "digits-cnn", "out": "from-flag", "batch_size": 7}),
], ids=["no-file", "file-only", "flags-win"])
def test_config_precedence(tmp_path, captured_run, file_text, flags, expected):
    config = tmp_path / "run.toml"
    config.write_text(file_text)
    assert main(["run", "--config", str(config)] + flags) == 0
    [call] = captured_run
    for key, value in expected.items():
        actual = call[key] if key in ("data", "model", "out") else getattr(call["config"], key)
        assert actual == value, key


@pytest.mark.parametrize("file_text, words", [
    ("data = 5\n", "data must be a string"),
    ("out = 5\n", "out must be a string"),
    ('quiet = "no"\n', "quiet is a string ('no') where true or false is expected"),
    ('model = ["x"]\n', "model must be a string"),
    ('lr = "0.1"\n', "lr is a string ('0.1') where a number is expected"),
    ('[run]\nbatch-size = "32"\n', "batch-size is a string ('32') where a whole number is "
                                   "expected"),
    ('epochs = 2.0\n', "epochs must be a whole number, got 2.0; write 2"),
    ('optimizer = 1\n', "optimizer is a whole number (1) where a name is expected"),
], ids=["data-int", "out-int", "quiet-string", "model-list", "lr-string", "batch-string",
        "epochs-float", "optimizer-int"])
def test_config_file_values_of_the_wrong_type_are_one_line_errors(tmp_path, capsys, file_text,
                                                                  words):
    err = fail(["run", "--config", write_config(tmp_path, file_text)], capsys)
    assert words in err


def test_sync_every_epoch_overrides_the_data_sets_every_step(tmp_path, captured_run):
    # digits-60k recommends averaging every step; "epoch" (flag or file) says once per epoch.
    assert main(["run", "--data", "digits-60k", "--strategy", "sync"]) == 0
    assert main(["run", "--data", "digits-60k", "--strategy", "sync", "--sync-every",
                 "epoch"]) == 0
    config = write_config(tmp_path, 'strategy = "sync"\nsync-every = "epoch"\n')
    assert main(["run", "--data", "digits-60k", "--config", config]) == 0
    assert [call["config"].sync_every for call in captured_run] == [1, None, None]


def write_config(tmp_path, text):
    path = tmp_path / "run.toml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("make_args, needle", [
    (lambda t: ["--data", "bogus"], "unknown data set 'bogus'"),
    (lambda t: ["--model", "bogus"], "unknown model 'bogus'"),
    (lambda t: ["--strategy", "bogus"], "Invalid value for '--strategy'"),
    (lambda t: ["--strategy", "dp", "--device", "cpu"], "needs --device cuda; on CPU use"),
    (lambda t: ["--strategy", "fedavg", "--epochs", "2"], "use --rounds"),
    (lambda t: ["--strategy", "fedavg", "--partition", "shards:0"], "shards:K"),
    (lambda t: ["--strategy", "fedavg", "--clients", "5000"], "clients"),
    (lambda t: ["--strategy", "sync", "--ddp-backend", "gloo"], "--strategy ddp"),
    (lambda t: ["--strategy", "ddp", "--ddp-backend", "nccl"], "nccl needs --device cuda"),
    (lambda t: ["--epochs", "0"], "--epochs must be a positive integer"),
    (lambda t: ["--epochs", "abc"], "Invalid value for '--epochs'"),
    (lambda t: ["--lr", "-1"], "--lr must be > 0"),
    (lambda t: ["--batch-size", "0"], "--batch-size must be a positive integer"),
    (lambda t: ["--strategy", "single", "--workers", "2"], "--workers"),
    (lambda t: ["--data", "mnist"], "--data mnist needs --data-dir"),
    (lambda t: ["--data", "mnist", "--data-dir", str(t / "nowhere")], "does not exist"),
    (lambda t: ["--data-dir", str(t)], "--data-dir is only used with --data mnist"),
    (lambda t: ["--data", "nomodule_xyz:make"], "cannot import module 'nomodule_xyz'"),
    (lambda t: ["--config", write_config(t, "epochs = \n")], "is not valid TOML"),
    (lambda t: ["--config", write_config(t, "epoch = 3\n")], "unknown key 'epoch'"),
    (lambda t: ["--config", str(t / "missing.toml")], "does not exist"),
    (lambda t: ["--config", write_config(t, "epochs = 0\n")], "run.toml: epochs must be"),
    (lambda t: ["--no-such-flag"], "No such option"),
    (lambda t: ["--strategy", "sync", "--sync-every", "often"],
     "'often' is neither a number of steps nor 'epoch'"),
    (lambda t: ["--strategy", "ddp", "--sync-every", "epoch"], "--strategy sync"),
], ids=["data", "model", "strategy-choice", "strategy-unavailable",
        "fedavg-epochs", "fedavg-partition", "fedavg-too-many-clients", "backend-not-ddp",
        "nccl-on-cpu", "epochs-0", "epochs-abc",
        "lr", "batch-size", "single-workers", "mnist-no-dir", "mnist-missing-dir",
        "data-dir-without-mnist", "import-string", "invalid-toml", "unknown-key",
        "missing-config", "bad-value-in-config", "unknown-flag", "sync-every-word",
        "sync-every-epoch-with-ddp"])
def test_user_errors_are_one_line_and_exit_2(tmp_path, capsys, make_args, needle):
    out = tmp_path / "out"
    err = fail(["run", "--quiet", "--out", str(out)] + make_args(tmp_path), capsys)
    assert needle in err
    assert not out.exists()


def test_unknown_command(capsys):
    assert "No such command 'bogus'" in fail(["bogus"], capsys)


@pytest.mark.parametrize("make_out, needle", [
    (lambda t: t / "file.txt" / "sub", "is not writable"),
    (lambda t: t / "file.txt", "exists and is not a directory"),
], ids=["under-a-file", "is-a-file"])
def test_unwritable_out(tmp_path, capsys, make_out, needle):
    (tmp_path / "file.txt").write_text("keep me")
    out = make_out(tmp_path)
    err = fail(["run", "--data", "linreg", "--epochs", "1", "--quiet", "--out", str(out)],
               capsys)
    assert needle in err and str(out) in err
    assert (tmp_path / "file.txt").read_text() == "keep me"


def test_failure_after_out_is_prepared_leaves_no_outputs(tmp_path, capsys):
    # The model is checked against the data only after --out has been created.
    (tmp_path / "mptrain_cli_wrong_model.py").write_text(
        "import torch.nn as nn\n\ndef make():\n    return nn.Linear(3, 1)\n")
    out = tmp_path / "out"
    err = fail(["run", "--data", "linreg", "--model",
                f"{tmp_path / 'mptrain_cli_wrong_model.py'}:make", "--epochs", "1", "--quiet",
                "--out", str(out)], capsys)
    assert "the model cannot take the data's inputs" in err
    assert not (out / "summary.json").exists()
    if out.exists():
        assert list(out.iterdir()) == []
    sys.modules.pop("mptrain_user_mptrain_cli_wrong_model", None)


def test_no_arguments_shows_help_not_an_error(capsys):
    try:
        main([])
    except SystemExit:
        pass
    out, err = capsys.readouterr()
    assert "Commands:" in out + err
    assert "mptrain: error:" not in err


def test_help_exits_zero(capsys):
    assert main(["run", "--help"]) == 0
    out, _ = capsys.readouterr()
    assert "--epochs" in out and "--config" in out


def test_devices(capsys):
    assert main(["devices"]) == 0
    out, err = capsys.readouterr()
    assert "CPU" in out and err == ""


def test_devices_json(capsys):
    assert main(["devices", "--json"]) == 0
    out, _ = capsys.readouterr()
    report = json.loads(out)
    assert "cpus" in report and report["cpus"]["usable"] >= 1


CONSOLE = ("import atexit, sys\n"
           "from mptrain.cli import console\n"
           "atexit.register(lambda: print('exit handler ran', flush=True))\n"
           "sys.argv = ['mptrain', *sys.argv[1:]]\n"
           "console()\n"
           "print('not reached')\n")


@pytest.mark.parametrize("args, code", [(["--version"], 0),
                                        (["run", "--data", "nope"], 2)])
def test_console_exits_with_main_code_after_the_exit_handlers(tmp_path, args, code):
    done = subprocess.run([sys.executable, "-c", CONSOLE, *args], capture_output=True,
                          text=True, cwd=tmp_path, timeout=50)
    assert done.returncode == code
    assert "exit handler ran" in done.stdout
    assert "not reached" not in done.stdout
    if code:
        assert done.stderr.startswith("mptrain: error: unknown data set 'nope'")
    else:   # from mptrain.__version__, installed or not
        assert done.stdout.startswith(f"mptrain, version {mptrain.__version__}\n")


def test_command_leaves_no_fork_server_behind(tmp_path):
    # A worker from a fork server (asked for: `mptrain run` forks even 2-thread workers),
    # which must not outlive the command (its teardown would take CPU from what runs next).
    # Output to a file, not a pipe: reading a pipe to its end would wait for the server too.
    log = tmp_path / "log"
    with log.open("w") as handle:
        done = subprocess.run([sys.executable, "-m", "mptrain", "run", "--strategy", "sync",
                               "--workers", "1", "--threads-per-worker", "2", "--epochs",
                               "1", "--steps-per-epoch", "2", "--start-method",
                               "forkserver"], stdout=handle,
                              stderr=subprocess.STDOUT, cwd=tmp_path, timeout=100)
    assert done.returncode == 0, log.read_text()
    assert "start method forkserver" in log.read_text()
    # Fork servers carry their parent's sys.path on their command line, so this command's
    # (cwd tmp_path) is told apart from those of other runs on the machine.
    left = [p.info for p in psutil.process_iter(["pid", "ppid", "cmdline"])
            if "multiprocessing.forkserver" in " ".join(p.info["cmdline"] or [])
            and str(tmp_path) in " ".join(p.info["cmdline"] or [])]
    assert left == []


def test_importing_the_package_and_its_command_leaves_torch_unimported():
    # The command parses its flags (and starts reading MNIST) before torch's second of
    # import; `mptrain --help` and a refused flag never import it.
    # One interpreter (a second one cost a Python start): a missing name is asked for
    # while torch is still unimported, as a fresh ``import mptrain; mptrain.nothing`` was.
    code = ("import sys, mptrain, mptrain.cli, mptrain.rl\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n"
            "try:\n"
            "    mptrain.nothing\n"
            "except AttributeError as missing:\n"
            "    print(missing)\n"
            "assert 'torch' not in sys.modules, 'torch imported by a missing name'\n"
            "assert mptrain.fit.__module__ == 'mptrain.api'\n"
            "assert mptrain.rl.ALGOS and 'fit' in dir(mptrain)\n"
            "assert 'torch' in sys.modules\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert "module 'mptrain' has no attribute 'nothing'" in done.stdout


def test_mnist_run_reads_its_files_ahead_and_leaves_no_thread(tmp_path, monkeypatch):
    import threading

    from mnist_files import write_mnist
    from mptrain.data import idx

    folder = write_mnist(tmp_path / "mnist", n_train=64, n_test=32)
    taken = []
    original = idx._ReadAhead.take
    monkeypatch.setattr(idx._ReadAhead, "take",
                        lambda self, path: taken.append(path) or original(self, path))
    assert main(["run", "--data", "mnist", "--data-dir", str(folder), "--model", "mlp",
                 "--epochs", "1", "--batch-size", "16", "--quiet",
                 "--out", str(tmp_path / "run")]) == 0
    assert len(taken) == 4
    assert idx._read_ahead is None
    assert not [t for t in threading.enumerate() if t.name.startswith("mptrain-read")]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["train_samples"] == 64 and summary["test_samples"] == 32


@pytest.mark.parametrize("signum", [2, 15], ids=["sigint", "sigterm"])
def test_a_stopped_run_says_where_it_stopped_and_exits_128_plus_the_signal(
        monkeypatch, capsys, signum):
    # RunInterrupted is a KeyboardInterrupt, which click turns into Abort: the message and
    # the exit code of the stop must come through it (not "interrupted", 130).
    from mptrain.errors import RunInterrupted

    def stopped(*args, **kwargs):
        raise RunInterrupted("stopped by SIG after 2 of 10 epochs; resume with: X", 128 + signum)

    monkeypatch.setattr(mptrain.api, "train", stopped)
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--quiet"])
    assert exit_.value.code == 128 + signum
    assert "mptrain: stopped by SIG after 2 of 10 epochs; resume with: X" in \
        capsys.readouterr().err


def test_a_second_ctrl_c_while_the_stop_unwinds_keeps_the_stop_message(monkeypatch, capsys):
    # A double Ctrl-C (the usual impatience) replaced "stopped by SIGINT ...; last
    # checkpoint ...; resume with ..." by "mptrain: error: interrupted".
    from mptrain.errors import RunInterrupted

    def stopped_then_interrupted(*args, **kwargs):
        try:
            raise RunInterrupted("stopped by SIGINT after 2 of 10 epochs; resume with: X", 130)
        except RunInterrupted:
            raise KeyboardInterrupt from None   # the second Ctrl-C, while it unwinds

    monkeypatch.setattr(mptrain.api, "train", stopped_then_interrupted)
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--quiet"])
    assert exit_.value.code == 130
    assert "mptrain: stopped by SIGINT after 2 of 10 epochs; resume with: X" in \
        capsys.readouterr().err


def test_the_command_exits_with_ctrl_c_ignored(monkeypatch):
    # A Ctrl-C during the exit handlers printed "Exception ignored in atexit callback ...
    # KeyboardInterrupt" under the stop message, and skipped the rest of the cleanup.
    import signal

    import mptrain.cli as cli_module

    seen = {}
    monkeypatch.setattr(cli_module, "main", lambda: 0)
    monkeypatch.setattr(cli_module.openmp, "this_process_is_the_command", lambda: None)
    monkeypatch.setattr(cli_module, "exit_after_cleanup",
                        lambda code: seen.update(code=code,
                                                 sigint=signal.getsignal(signal.SIGINT)))
    previous = signal.getsignal(signal.SIGINT)
    try:
        cli_module.console()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert seen == {"code": 0, "sigint": signal.SIG_IGN}
