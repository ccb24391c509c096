"""Tests for mptrain.config: validation, building from settings over data-set defaults,
refusal of settings that would do nothing, and TOML config files."""

import dataclasses
import pickle

import pytest

from mptrain.config import (CONFIG_FILE_KEYS, SETTING_NAMES, TrainConfig, TrainingDefaults,
                            applicable_settings, load_config_file)
from mptrain.strategies.fedavg.settings import FedAvgSettings
from mptrain.strategies.registry import STRATEGIES, restricted_settings
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
    ({"strategy": "dp"}, "strategy"),
    ({"ddp_backend": "nccl", "strategy": "ddp", "workers": 2}, "nccl"),
    ({"rounds": 0}, "rounds"),
    ({"clients": 0}, "clients"),
    ({"clients_per_round": 0}, "clients-per-round"),
    ({"client_fraction": 0}, "client-fraction"),
    ({"client_fraction": 1.5}, "client-fraction"),
    ({"local_epochs": 0}, "local-epochs"),
    ({"prox_mu": -1}, "prox-mu"),
    ({"server_lr": 0}, "server-lr"),
    ({"server_momentum": 1}, "server-momentum"),
    ({"eval_every": 0}, "eval-every"),
    ({"target_accuracy": 1.5}, "target-accuracy"),
    ({"strategy": "fedavg", "workers": 2, "clients": 5, "clients_per_round": 6},
     "clients-per-round"),
    ({"strategy": "fedavg", "workers": 2, "clients_per_round": 5, "client_fraction": 0.1},
     "client-fraction"),
])
def test_bad_values_are_user_errors_naming_the_flag(changes, flag):
    with pytest.raises(UserError) as info:
        TrainConfig(**changes)
    message = str(info.value)
    assert flag in message
    assert "\n" not in message


def test_help_offers_only_strategies_that_exist():
    from mptrain.strategies.registry import strategy_classes

    assert tuple(strategy_classes()) == STRATEGIES


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
    {"strategy": "fedavg", "workers": 2, "clients": 10, "clients_per_round": 10},
    {"strategy": "fedavg", "workers": 2, "client_fraction": 0.5, "clients_per_round": None},
])
def test_good_values_are_accepted(changes):
    config = TrainConfig(**changes)
    for name, value in changes.items():
        assert config.setting(name) == value


def test_config_is_frozen():
    config = TrainConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.epochs = 3


def test_replace_validates_again():
    with pytest.raises(UserError, match="--epochs"):
        TrainConfig().replace(epochs=0)


DEFAULTS = TrainingDefaults(epochs=7, batch_size=16, lr=0.3, momentum=0.5, optimizer="adam",
                            lr_decay=0.9, lr_schedule="cosine", sync_every=4)
KNOBS = [f.name for f in dataclasses.fields(TrainingDefaults) if f.name != "federated"]
# Explicit settings that differ from DEFAULTS, falsy ones included.
SETTINGS = {"epochs": 2, "batch_size": 5, "lr": 0.25, "momentum": 0.0, "optimizer": "sgd",
            "lr_decay": 1.0, "lr_schedule": "step", "sync_every": 1}


def test_every_knob_has_a_test_setting():
    assert set(KNOBS) == set(SETTINGS)


def test_defaults_fill_every_unset_knob():
    config = TrainConfig.from_settings({"strategy": "sync"}, DEFAULTS)
    for name in KNOBS:
        assert getattr(config, name) == getattr(DEFAULTS, name), name
    assert config.workers == 2


def test_settings_win_over_defaults_even_when_falsy():
    config = TrainConfig.from_settings({"strategy": "sync", "workers": 3, **SETTINGS}, DEFAULTS)
    for name, value in SETTINGS.items():
        assert getattr(config, name) == value, name


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_each_setting_replaces_only_its_default(name):
    config = TrainConfig.from_settings({"strategy": "sync", name: SETTINGS[name]}, DEFAULTS)
    assert getattr(config, name) == SETTINGS[name]
    for other in set(KNOBS) - {name}:
        assert getattr(config, other) == getattr(DEFAULTS, other), other


def test_none_means_not_said():
    assert TrainConfig.from_settings({"strategy": "sync", "lr": None}, DEFAULTS).lr == DEFAULTS.lr


def test_sync_every_default_applies_to_sync_only():
    assert TrainConfig.from_settings({"strategy": "ddp"}, DEFAULTS).sync_every is None
    assert TrainConfig.from_settings({}, TrainingDefaults()).sync_every is None


def test_sync_every_epoch_overrides_a_data_set_that_averages_every_step():
    every_step = TrainingDefaults(sync_every=1)
    assert TrainConfig.from_settings({"strategy": "sync"}, every_step).sync_every == 1
    config = TrainConfig.from_settings({"strategy": "sync", "sync_every": "epoch"}, every_step)
    assert config.sync_every is None


@pytest.mark.parametrize("word", ["Epoch", "often", ""])
def test_sync_every_words_other_than_epoch_are_refused_naming_both_forms(word):
    with pytest.raises(UserError, match="takes a number of steps or 'epoch'"):
        TrainConfig.from_settings({"strategy": "sync", "sync_every": word})


def test_sync_every_epoch_does_nothing_with_other_strategies():
    with pytest.raises(UserError, match="--sync-every does nothing with --strategy ddp"):
        TrainConfig.from_settings({"strategy": "ddp", "sync_every": "epoch"})


def test_a_resumed_run_keeps_averaging_once_per_epoch():
    # None in a checkpoint's config is a choice; read back as "not said", the data set's
    # every-step recipe would take over on resume.
    every_step = TrainingDefaults(sync_every=1)
    config = TrainConfig.from_settings({"strategy": "sync", "sync_every": "epoch"}, every_step)
    settings = applicable_settings(config.as_dict())
    assert settings["sync_every"] == "epoch"
    assert TrainConfig.from_settings(settings, every_step).sync_every is None


@pytest.mark.parametrize("strategy, workers", [("single", 1), ("hogwild", 2), ("sync", 2),
                                               ("ddp", 2), ("fedavg", 2)])
def test_default_workers(strategy, workers):
    assert TrainConfig.from_settings({"strategy": strategy}).workers == workers


def test_fedavg_takes_the_federated_recipe():
    federated = dict(TrainingDefaults().federated, rounds=7, lr=0.2)
    config = TrainConfig.from_settings({"strategy": "fedavg"},
                                       TrainingDefaults(lr=0.001, federated=federated))
    assert (config.fedavg.rounds, config.lr, config.units, config.unit) == (7, 0.2, 7, "round")
    assert config.fedavg.sampled_clients == federated["clients_per_round"]


def test_client_fraction_replaces_the_default_count():
    config = TrainConfig.from_settings({"strategy": "fedavg", "clients": 50,
                                        "client_fraction": 0.1})
    assert config.fedavg.clients_per_round is None and config.fedavg.sampled_clients == 5


@pytest.mark.parametrize("name, strategy, value, instead", [
    ("epochs", "fedavg", 3, "--rounds"),
    ("rounds", "sync", 3, "--epochs"),
    ("sync_every", "ddp", 2, "--strategy sync"),
    ("sync_every", "hogwild", 2, "--strategy sync"),
    ("share_optimizer_state", "sync", True, "--strategy hogwild"),
    ("ddp_backend", "sync", "gloo", "--strategy ddp"),
    ("ddp_backend", "hogwild", "gloo", "--strategy ddp"),
    ("max_restarts", "single", 2, "--strategy sync or ddp"),
    ("clients", "sync", 10, "--strategy fedavg"),
    ("partition", "ddp", "shards:2", "--strategy fedavg"),
    # A client's learning rate is one value a round (clients.client_lr): cosine's anneal
    # within an epoch trained exactly as step did, without a word.
    ("lr_schedule", "fedavg", "cosine", "--lr-decay"),
    ("lr_schedule", "fedbuff", "cosine", "--lr-decay"),
])
def test_settings_that_would_do_nothing_are_refused(name, strategy, value, instead):
    with pytest.raises(UserError) as info:
        TrainConfig.from_settings({"strategy": strategy, name: value})
    message = str(info.value)
    assert f"--{name.replace('_', '-')} does nothing with --strategy {strategy}" in message
    assert instead in message and "\n" not in message


def test_sharing_the_state_of_an_optimizer_that_keeps_none_is_refused():
    # Plain SGD keeps no state: the banner said "optimizer state shared" and nothing was.
    with pytest.raises(UserError, match=r"^--share-optimizer-state shares the optimizer's "
                                        r"state, and plain SGD \(--momentum 0\) keeps none"):
        TrainConfig.from_settings({"strategy": "hogwild", "share_optimizer_state": True,
                                   "optimizer": "sgd", "momentum": 0.0})
    for kept in ({"momentum": 0.9}, {"optimizer": "adam", "momentum": 0.0}):
        TrainConfig.from_settings({"strategy": "hogwild", "share_optimizer_state": True,
                                   **kept})


def test_a_setting_given_at_its_default_is_not_refused():
    # Config files and scripts often spell defaults out; that changes nothing, so it passes.
    TrainConfig.from_settings({"strategy": "sync", "ddp_backend": "auto",
                               "share_optimizer_state": False})
    TrainConfig.from_settings({"strategy": "sync", "rounds": 20, "scaffold": False})
    TrainConfig.from_settings({"strategy": "fedavg", "lr_schedule": "step"})


@pytest.mark.parametrize("strategy", ["single", "hogwild", "sync", "ddp"])
def test_every_epoch_strategy_takes_the_cosine_schedule(strategy):
    assert TrainConfig.from_settings({"strategy": strategy,
                                      "lr_schedule": "cosine"}).lr_schedule == "cosine"


def test_every_strategy_restricted_setting_names_real_strategies():
    for name, strategies in restricted_settings().items():
        assert set(strategies) <= set(STRATEGIES), name


def test_unknown_settings_are_refused():
    with pytest.raises(UserError, match="unknown setting"):
        TrainConfig.from_settings({"epoch": 3})


def test_applicable_settings_drop_what_the_strategy_does_not_use():
    config = TrainConfig.from_settings({"strategy": "fedavg", "rounds": 3}).as_dict()
    settings = applicable_settings(config)
    assert "epochs" not in settings and "sync_every" not in settings
    assert settings["rounds"] == 3
    assert TrainConfig.from_settings(settings).fedavg.rounds == 3


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
    config = TrainConfig.from_settings(load_config_file(str(path)))
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
    assert CONFIG_FILE_KEYS == set(SETTING_NAMES) | {"data", "model", "data_dir", "out",
                                                     "logger", "tb_dir", "client_column",
                                                     "features", "label"}


def test_fedavg_settings_are_given_flat_and_kept_in_their_own_section():
    config = TrainConfig(strategy="fedavg", rounds=5, clients=40, lr=0.1)
    assert isinstance(config.fedavg, FedAvgSettings)
    assert (config.fedavg.rounds, config.fedavg.clients, config.lr) == (5, 40, 0.1)
    assert not hasattr(config, "rounds")          # one place to read it
    changed = config.replace(rounds=7)
    assert (changed.fedavg.rounds, changed.fedavg.clients) == (7, 40)
    assert config.replace(fedavg=FedAvgSettings(rounds=2)).fedavg.clients == 100
    with pytest.raises(UserError, match="--rounds must be a positive integer"):
        TrainConfig(strategy="fedavg", rounds=0)
    with pytest.raises(TypeError, match="unknown setting"):
        TrainConfig(roundz=3)
    assert pickle.loads(pickle.dumps(config)) == config


def test_as_dict_is_flat_in_the_flags_order():
    flat = TrainConfig(strategy="fedavg", server_optimizer="adam",
                       server_betas="0.8,0.9").as_dict()
    assert tuple(flat) == SETTING_NAMES and "fedavg" not in flat
    assert flat["server_betas"] == (0.8, 0.9) and flat["rounds"] == 20
    assert TrainConfig(**flat).as_dict() == flat


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


def test_one_file_configures_both_commands_each_reading_its_own_table(tmp_path):
    # `mptrain run --config` of a file with an [rl] table: "unknown key 'rl'" (issue 57);
    # `mptrain rl` merged [run]'s keys too, and refused its epochs.
    from mptrain.rl.config import rl_setting_names

    path = tmp_path / "both.toml"
    path.write_text('seed = 3\n[run]\nepochs = 2\n[rl]\nsteps = 5000\n')
    assert load_config_file(path) == {"seed": 3, "epochs": 2}
    assert load_config_file(path, rl_setting_names(), tables=("rl", "run")) == \
        {"seed": 3, "steps": 5000}


def test_an_rl_file_of_before_the_rl_table_is_still_read_from_run(tmp_path):
    from mptrain.rl.config import rl_setting_names

    path = tmp_path / "old.toml"
    path.write_text('[run]\nsteps = 5000\n')
    assert load_config_file(path, rl_setting_names(), tables=("rl", "run")) == {"steps": 5000}
