"""How a user asks for trackers -- --logger and --tb-dir on `mptrain run` and `mptrain rl`,
TOML ``logger``/``tb_dir``, ``fit(loggers=...)`` -- and the one-line refusals."""

import importlib.util
import subprocess
import sys

import pytest

import mptrain
import mptrain.api
from mptrain.cli import main
from mptrain.config import load_config_file
from mptrain.errors import UserError
from mptrain.trackers import make_trackers, parse_loggers, tracker_names
from tracker_runs import RECIPE, make_data, make_model
from user_errors import fail

pytestmark = pytest.mark.timeout(90)


@pytest.mark.parametrize("value, expected", [
    (None, ()), ("", ()), ("csv", ("csv",)), ("tensorboard,csv", ("tensorboard", "csv")),
    (["mlflow", "csv,wandb"], ("mlflow", "csv", "wandb")), (" CSV , csv ", ("csv",)),
])
def test_parse_loggers(value, expected):
    assert parse_loggers(value) == expected


@pytest.mark.parametrize("value", ["tensorbored", ["csv", "neptune"], 3, [1]])
def test_bad_names_are_refused_naming_the_choices(value):
    with pytest.raises(UserError) as caught:
        parse_loggers(value)
    assert all(name in str(caught.value) for name in tracker_names())


@pytest.fixture
def captured_run(monkeypatch):
    calls = []
    monkeypatch.setattr(mptrain.api, "run", lambda request: calls.append(request))
    return calls


@pytest.mark.parametrize("file_text, flags, loggers, tb_dir", [
    ("", ["--logger", "tensorboard,csv"], ("tensorboard", "csv"), None),
    ("", ["--logger", "csv", "--logger", "mlflow", "--tb-dir", "tb"], ("csv", "mlflow"), "tb"),
    ('logger = ["wandb", "csv"]\ntb-dir = "board"\n', [], ("wandb", "csv"), "board"),
    ('logger = "csv,mlflow"\n', [], ("csv", "mlflow"), None),
    ('[run]\nlogger = ["wandb"]\ntb_dir = "x"\n', ["--logger", "csv"], ("csv",), "x"),
], ids=["flag", "repeated-flag", "toml-list", "toml-string", "flag-wins"])
def test_the_cli_hands_the_trackers_over_outside_the_config(tmp_path, captured_run,
                                                           file_text, flags, loggers, tb_dir):
    config = tmp_path / "run.toml"
    config.write_text(file_text)
    assert main(["run", "--config", str(config)] + flags) == 0
    [request] = captured_run
    assert (request.loggers, request.tb_dir) == (loggers, tb_dir)
    assert not hasattr(request.config, "logger")   # checkpoints compare configs


@pytest.mark.parametrize("args, needle", [
    (["run", "--logger", "tensorbored"], "unknown --logger 'tensorbored'; choose from: "
                                         "tensorboard, mlflow, wandb, csv"),
    (["rl", "--logger", "nope"], "unknown --logger 'nope'"),
    (["run", "--logger", "csv"], "--logger csv needs --out DIR"),
    (["run", "--tb-dir", "x"], "--tb-dir does nothing without --logger tensorboard"),
])
def test_cli_refusals_are_one_line(args, needle, capsys):
    if args[0] == "rl":
        pytest.importorskip("gymnasium")
    assert needle in fail(args + ["--quiet"], capsys)


def test_a_bad_logger_in_a_config_file_names_the_file(tmp_path):
    config = tmp_path / "run.toml"
    config.write_text('logger = ["csv", "excel"]\n')
    with pytest.raises(UserError, match=r"run.toml: unknown --logger 'excel'"):
        load_config_file(config)
    config.write_text('tb-dir = 3\n')
    with pytest.raises(UserError, match="tb-dir must be a string"):
        load_config_file(config)


@pytest.mark.parametrize("name, extra", [("tensorboard", "tensorboard"), ("mlflow", "mlflow"),
                                         ("wandb", "wandb")])
def test_a_tracker_not_installed_is_one_line_naming_the_extra(tmp_path, monkeypatch, name,
                                                              extra):
    real = importlib.util.find_spec
    hidden = {"tensorboard": {"tensorboard"}, "mlflow": {"mlflow"}, "wandb": {"wandb"}}[name]
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda module, *a: None if module in hidden else real(module, *a))
    train, test = make_data()
    with pytest.raises(UserError) as caught:
        mptrain.fit(make_model(), train, test, out=tmp_path / "run", loggers=[name],
                    **RECIPE)
    message = str(caught.value)
    assert f"pip install 'mptrain[{extra}]'" in message and "\n" not in message
    assert not (tmp_path / "run").exists()   # refused before anything was written


def test_places_are_checked(tmp_path, monkeypatch):
    from mptrain.trackers import tracker_class

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with pytest.raises(UserError, match="--logger tensorboard needs --out DIR"):
        tracker_class("tensorboard").check_place(None, None)
    with pytest.raises(UserError, match="or MLFLOW_TRACKING_URI"):
        tracker_class("mlflow").check_place(None, None)
    tracker_class("tensorboard").check_place(None, tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:1")
    tracker_class("mlflow").check_place(None, None)
    assert make_trackers(["csv"], tmp_path, enabled=False) == []


def test_the_rl_command_takes_the_same_flags(tmp_path, monkeypatch):
    pytest.importorskip("gymnasium")
    import mptrain.rl.api

    calls = []
    monkeypatch.setattr(mptrain.rl.api, "run", lambda request: calls.append(request)
                        or request.family.result(request.model, request.config))
    assert main(["rl", "--logger", "csv", "--logger", "tensorboard", "--tb-dir", "b",
                 "--out", str(tmp_path / "o"), "--quiet"]) == 0
    assert (calls[0].loggers, calls[0].tb_dir) == (("csv", "tensorboard"), "b")


def test_a_run_without_logger_imports_no_tracker_library(tmp_path):
    code = ("import sys\n"
            "from mptrain.cli import main\n"
            f"assert main(['run', '--data', 'linreg', '--epochs', '1', '--quiet', '--logger',"
            f" 'csv', '--out', {str(tmp_path / 'run')!r}]) == 0\n"
            "loaded = sorted({m.split('.')[0] for m, module in sys.modules.items() "
            "if module is not None} & "
            "{'tensorboard', 'mlflow', 'wandb', 'tensorboardX'})\n"
            "assert not loaded, loaded\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=80)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "run" / "metrics.csv").is_file()
