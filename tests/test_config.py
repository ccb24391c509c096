"""Tests for mptrain.config: validation, default resolution and TOML config files."""

import dataclasses

import pytest

from mptrain.config import (AVAILABLE_STRATEGIES, CONFIG_FILE_KEYS, TrainConfig,
                            TrainingDefaults, load_config_file, resolve)
from mptrain.errors import UserError


@pytest.mark.parametrize("changes, flag", [
    ({"epochs": 0}, "epochs"),
    ({"epochs": -3}, "epochs"),
    ({"epochs": 1.5}, "epochs"),
    ({"epochs": True}, "epochs"),
    ({"epochs": "2"}, "epochs"),
    ({"batch_size": 0}, "batch-size"),
    ({"batch_size": -1}, "batch-size"),
    ({"workers": 0, "strategy": "hogwild"}, "workers"),
    ({"workers": -2, "strategy": "sync"}, "workers"),
    ({"threads_per_worker": 0}, "threads-per-worker"),
    ({"sync_every": 0}, "sync-every"),
    ({"eval_batch_size": 0}, "eval-batch-size"),
    ({"lr": 0}, "lr"),
    ({"lr": 0.0}, "lr"),
    ({"lr": -0.1}, "lr"),
    ({"lr": float("nan")}, "lr"),
    ({"lr": "0.1"}, "lr"),
    ({"lr": True}, "lr"),
    ({"momentum": -0.1}, "momentum"),
    ({"momentum": 1}, "momentum"),
    ({"momentum": 1.0}, "momentum"),
    ({"momentum": 1.5}, "momentum"),
    ({"lr_decay": 0}, "lr-decay"),
    ({"lr_decay": 1.5}, "lr-decay"),
    ({"weight_decay": -1e-4}, "weight-decay"),
    ({"optimizer": "rmsprop"}, "optimizer"),
    ({"strategy": "bogus"}, "strategy"),
    ({"ddp_backend": "mpi"}, "ddp-backend"),
    ({"device": "tpu"}, "device"),
    ({"start_method": "thread"}, "start-method"),
    ({"sharing_strategy": "cuda_ipc"}, "sharing-strategy"),
    ({"seed": -1}, "seed"),
    ({"seed": 1.0}, "seed"),
    ({"worker_timeout": 0}, "worker-timeout"),
    ({"strategy": "single", "workers": 2}, "workers"),
])
def test_bad_values_are_user_errors_naming_the_flag(changes, flag):
    with pytest.raises(UserError) as info:
        TrainConfig(**changes)
    message = str(info.value)
    assert flag in message
    assert "\n" not in message


@pytest.mark.parametrize("strategy", ["fedavg", "dp"])
def test_planned_strategies_are_not_available_yet(strategy):
    with pytest.raises(UserError, match="not available yet") as info:
        TrainConfig(strategy=strategy)
    assert repr(strategy) in str(info.value)
    for available in AVAILABLE_STRATEGIES:
        assert available in str(info.value)


def test_single_with_workers_names_the_alternatives():
    with pytest.raises(UserError, match="--workers") as info:
        TrainConfig(strategy="single", workers=2)
    assert "hogwild" in str(info.value)


@pytest.mark.parametrize("changes", [
    {},
    {"strategy": "single", "workers": 1},
    {"strategy": "hogwild", "workers": 4},
    {"strategy": "sync", "workers": 2, "sync_every": 8},
    {"strategy": "ddp", "ddp_backend": "gloo"},
    {"epochs": 1, "batch_size": 1, "lr": 1e-9, "momentum": 0.0, "optimizer": "adam"},
    {"momentum": 0.999, "weight_decay": 0, "seed": 0, "worker_timeout": 0.5},
    {"start_method": "spawn", "device": "cpu"},
])
def test_good_values_are_accepted(changes):
    config = TrainConfig(**changes)
    for name, value in changes.items():
        assert getattr(config, name) == value


def test_config_is_frozen():
    config = TrainConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.epochs = 3


def test_replace_validates_again():
    with pytest.raises(UserError, match="--epochs"):
        TrainConfig().replace(epochs=0)


DEFAULTS = TrainingDefaults(epochs=7, batch_size=16, lr=0.3, momentum=0.5, optimizer="adam",
                            lr_decay=0.9, sync_every=4)
KNOBS = [f.name for f in dataclasses.fields(TrainingDefaults)]
# Explicit settings that differ from DEFAULTS, falsy ones included.
SETTINGS = {"epochs": 2, "batch_size": 5, "lr": 0.25, "momentum": 0.0, "optimizer": "sgd",
            "lr_decay": 1.0, "lr_schedule": "step", "sync_every": 1}


def test_every_knob_has_a_test_setting():
    assert set(KNOBS) == set(SETTINGS)


def test_resolve_fills_every_unset_knob():
    resolved = resolve(TrainConfig(strategy="sync"), DEFAULTS)
    for name in KNOBS:
        assert getattr(resolved, name) == getattr(DEFAULTS, name), name
    assert resolved.workers == 2


def test_resolve_keeps_what_is_set_even_when_falsy():
    config = TrainConfig(strategy="hogwild", workers=3, **SETTINGS)
    assert resolve(config, DEFAULTS) == config


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_resolve_fills_only_what_is_none(name):
    resolved = resolve(TrainConfig(**{name: SETTINGS[name]}), DEFAULTS)
    assert getattr(resolved, name) == SETTINGS[name]
    for other in set(KNOBS) - {name}:
        assert getattr(resolved, other) == getattr(DEFAULTS, other), other


def test_resolve_without_default_sync_every_leaves_it_unset():
    resolved = resolve(TrainConfig(), TrainingDefaults())
    assert resolved.sync_every is None
    assert resolved.workers == 1


@pytest.mark.parametrize("strategy, workers", [("single", 1), ("hogwild", 2), ("sync", 2),
                                               ("ddp", 2)])
def test_resolve_default_workers(strategy, workers):
    assert resolve(TrainConfig(strategy=strategy), TrainingDefaults()).workers == workers


def test_resolve_does_not_touch_the_input():
    config = TrainConfig()
    resolve(config, DEFAULTS)
    assert config.epochs is None and config.workers is None


@pytest.mark.parametrize("text", [
    'epochs = 3\nbatch-size = 16\nlr = 0.5\nshare-optimizer-state = true\ndata-dir = "d"\n',
    'epochs = 3\nbatch_size = 16\nlr = 0.5\nshare_optimizer_state = true\ndata_dir = "d"\n',
    '[run]\nepochs = 3\nbatch-size = 16\nlr = 0.5\nshare_optimizer_state = true\n'
    'data-dir = "d"\n',
    'epochs = 1\nlr = 0.5\n[run]\nepochs = 3\nbatch-size = 16\nshare-optimizer-state = true\n'
    'data_dir = "d"\n',
], ids=["dashes", "underscores", "run-table", "run-table-wins"])
def test_load_config_file(tmp_path, text):
    path = tmp_path / "run.toml"
    path.write_text(text)
    assert load_config_file(path) == {"epochs": 3, "batch_size": 16, "lr": 0.5,
                                      "share_optimizer_state": True, "data_dir": "d"}


def test_load_config_file_values_build_a_config(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('strategy = "sync"\nworkers = 3\nsync-every = 2\noptimizer = "adam"\n')
    config = TrainConfig(**load_config_file(str(path)))
    assert (config.strategy, config.workers, config.sync_every, config.optimizer) == \
        ("sync", 3, 2, "adam")


def test_empty_config_file(tmp_path):
    path = tmp_path / "empty.toml"
    path.write_text("")
    assert load_config_file(path) == {}


@pytest.mark.parametrize("text, key", [
    ("epoch = 3\n", "epoch"),
    ("[run]\nbatchsize = 3\n", "batchsize"),
    ("extra = 1\n", "extra"),
    ("[other]\nepochs = 3\n", "other"),
])
def test_unknown_key_lists_known_keys(tmp_path, text, key):
    path = tmp_path / "run.toml"
    path.write_text(text)
    with pytest.raises(UserError) as info:
        load_config_file(path)
    message = str(info.value)
    assert repr(key) in message and str(path) in message
    assert "known keys:" in message
    for known in ("epochs", "batch-size", "lr", "data-dir", "share-optimizer-state"):
        assert known in message
    assert "\n" not in message


def test_config_file_keys_are_the_flags():
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    assert CONFIG_FILE_KEYS == (fields - {"extra"}) | {"data", "model", "data_dir", "out"}


@pytest.mark.parametrize("text", ["epochs = \n", "epochs 3\n", "[run\n", "lr = 0.1\nlr = 0.2\n"],
                         ids=["no-value", "no-equals", "open-table", "duplicate-key"])
def test_invalid_toml(tmp_path, text):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(UserError, match="not valid TOML") as info:
        load_config_file(path)
    assert str(path) in str(info.value)


def test_missing_config_file(tmp_path):
    path = tmp_path / "missing.toml"
    with pytest.raises(UserError, match="does not exist") as info:
        load_config_file(path)
    assert str(path) in str(info.value) and "--config" in str(info.value)


def test_config_file_that_is_a_directory(tmp_path):
    with pytest.raises(UserError, match="cannot read config file"):
        load_config_file(tmp_path)


def test_config_file_that_is_not_utf8(tmp_path):
    path = tmp_path / "binary.toml"
    path.write_bytes(b'epochs = 3\ndata = "\xff\xfe"\n')
    with pytest.raises(UserError, match=str(path)):
        load_config_file(path)
