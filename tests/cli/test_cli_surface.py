"""The command line says what the run does: a flag for every setting a config file takes,
help defaults that are the ones that run, closing lines that name what was written."""

import re

import pytest

from mptrain.cli import main
from mptrain.cli.rl import rl as rl_command
from mptrain.cli.run import run as run_command
from mptrain.config import SETTING_NAMES
from mptrain.data.recipes import RECIPES, recipe_for
from mptrain.data.sources import BUILTIN_SOURCES
from mptrain.rl.config import rl_setting_names
from mptrain.settings import flags, supervised_config
from mptrain.strategies.registry import STRATEGIES

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("command, names", [(run_command, SETTING_NAMES),
                                            (rl_command, rl_setting_names())])
def test_every_setting_a_config_file_takes_has_a_flag(command, names):
    # `eval-batch-size` was accepted in a file and "No such option" as a flag.
    assert set(names) <= {param.name for param in command.params}


def help_of(command, name):
    import click

    [param] = [p for p in command.params if p.name == name]
    return " ".join(param.get_help_record(click.Context(command))[1].split())


def defaults_in_help(text):
    """``default: digits 20, digits-60k/mnist/your data 100`` -> {data set: '20', ...}."""
    found = re.search(r"default(?::)? ([^;)]*)", text).group(1)
    if " " not in found:
        return {name: found for name in [*RECIPES, "your data"]}
    return {name: value for part in found.split(", ")
            for names, value in [part.rsplit(" ", 1)] for name in names.split("/")}


def test_data_help_names_every_built_in_data_set():
    assert set(RECIPES) == set(BUILTIN_SOURCES)
    text = help_of(run_command, "data")
    assert all(name in text for name in BUILTIN_SOURCES)


def test_help_and_usage_say_what_a_data_or_model_factory_is_called_with_and_returns():
    # "module:factory" alone left a user to guess: the model factory got no arguments,
    # and an input_shape parameter ended in "missing 1 required positional argument".
    assert "function of no arguments returning (train_set, test_set or None)" in \
        help_of(run_command, "data")
    assert "function of no arguments returning an nn.Module" in help_of(run_command, "model")
    from pathlib import Path

    usage = (Path(__file__).resolve().parents[2] / "docs" / "usage.md").read_text()
    assert "## Your own data and model" in usage


@pytest.mark.parametrize("name", ["rounds", "clients", "clients_per_round", "local_epochs"])
def test_fedavg_help_defaults_are_what_runs_on_each_data_set(name):
    # --help said --clients 100, --clients-per-round 10, --local-epochs 1; on digits the run
    # used 20, 5 and 2.
    shown = defaults_in_help(help_of(run_command, name))
    for data in RECIPES:
        config = supervised_config([flags({"strategy": "fedavg"})], defaults=recipe_for(data))
        value = config.fedavg.sampled_clients if name == "clients_per_round" \
            else config.setting(name)
        assert shown[data] == str(value), (data, shown)


@pytest.mark.parametrize("name", ["epochs", "batch_size", "lr", "momentum", "optimizer",
                                  "sync_every"])
def test_help_defaults_are_what_runs_on_each_data_set(name):
    text = help_of(run_command, name)
    shown = defaults_in_help(text)
    for data in RECIPES:
        strategy = "sync" if name == "sync_every" else "single"
        config = supervised_config([flags({"strategy": strategy})], defaults=recipe_for(data))
        value = getattr(config, name)
        expected = "epoch" if value is None else \
            f"{value:g}" if isinstance(value, float) else str(value)
        assert shown[data] == expected, data


@pytest.mark.parametrize("data", ["digits", "digits-60k", "linreg"])
@pytest.mark.parametrize("strategy", [s for s in STRATEGIES if s != "dp"])
def test_every_built_in_data_set_takes_every_strategys_defaults(data, strategy):
    # linreg + fedavg failed: 100 default clients for 80 training samples.
    from mptrain.data.partitions import partition_clients
    from mptrain.data.sources import load_data

    config = supervised_config([flags({"strategy": strategy})], defaults=recipe_for(data))
    bundle = load_data(data, None)
    assert bundle.defaults is recipe_for(data)
    if strategy == "fedavg":
        fedavg = config.fedavg
        clients = partition_clients(fedavg.partition, bundle.train.targets, fedavg.clients,
                                    config.seed)
        assert len(clients) == fedavg.clients >= fedavg.sampled_clients


def test_linreg_runs_fedavg_on_its_defaults(tmp_path, capsys):
    assert main(["run", "--data", "linreg", "--strategy", "fedavg", "--rounds", "2",
                 "--out", str(tmp_path), "--logger", "csv"]) == 0
    out = capsys.readouterr().out
    # the csv logger's file is named with the others
    assert re.search(r"outputs in .*: summary\.json metrics\.jsonl metrics\.csv model\.pt "
                     r"curves\.png", out), out


def test_the_banner_counts_in_words_and_shows_adams_betas(capsys):
    # One thread: a forked worker, not the fork server's (seconds that prove nothing here).
    assert main(["run", "--data", "linreg", "--epochs", "1", "--optimizer", "adam",
                 "--strategy", "sync", "--workers", "1", "--sync-every", "1",
                 "--threads-per-worker", "1"]) == 0
    out = capsys.readouterr().out
    assert "1 epoch ·" in out and "1 epochs" not in out
    assert "optimizer adam lr 0.005 betas 0.9,0.999" in out and "momentum" not in out
    assert "1 worker ×" in out and "averaged every step" in out
