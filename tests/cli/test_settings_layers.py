"""The one settings path (``mptrain.settings``) as each entry point uses it: layers in order,
each named as its caller writes it, unknown names refused, resumes that name another strategy
or leave no work refused before anything is built."""

import contextlib

import pytest

import mptrain
import mptrain.rl
from mptrain.checkpoint import Checkpoint
from mptrain.config import TrainConfig, TrainingDefaults
from mptrain.errors import UserError
from mptrain.rl.config import RLConfig
from mptrain.rl.api import rl_config
from mptrain.settings import config_file, flags, keywords, supervised_config
from mptrain.config import load_config_file

RECIPE = TrainingDefaults(epochs=7, lr=0.3)


def checkpoint_of(config, epoch):
    return Checkpoint(epoch=epoch, strategy=config.strategy, config=config.as_dict(), run={},
                      model={}, ranks=[{}], metrics=[])


def test_layers_stack_recipe_checkpoint_file_flags(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text("lr = 0.2\nbatch-size = 16\nseed = 3\n")
    resumed = checkpoint_of(TrainConfig(epochs=2, lr=0.1, batch_size=8, seed=1,
                                        momentum=0.5), epoch=1)
    config = supervised_config([config_file(load_config_file(path)), flags({"seed": 9})],
                               checkpoint=resumed, defaults=RECIPE)
    # recipe < checkpoint < file < flags
    assert (config.momentum, config.epochs, config.lr, config.batch_size, config.seed) == \
        (0.5, 2, 0.2, 16, 9)


@pytest.mark.parametrize("layer, words", [
    (flags({"workers": 0}), "--workers must be a positive integer"),
    (keywords({"workers": 0}, "fit()"), "fit(): workers must be a positive integer"),
    (keywords({"lr": "0.1"}, "fit()"), "fit(): lr is a string ('0.1') where a number is "
                                       "expected"),
    (keywords({"epochz": 1}, "fit()"), "fit(): unknown setting epochz (did you mean epochs?)"),
])
def test_each_layer_names_settings_as_its_caller_writes_them(layer, words):
    with pytest.raises(UserError) as info:
        supervised_config([layer], defaults=RECIPE)
    assert words in str(info.value) and "\n" not in str(info.value)


def test_a_config_file_layer_quotes_the_file_and_its_key(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('[run]\nlearning-starts = "many"\n')
    values = load_config_file(path, {f for f in RLConfig.__dataclass_fields__})
    with pytest.raises(UserError, match=r"run.toml: learning-starts is a string \('many'\) "
                                        "where a whole number is expected"):
        rl_config([config_file(values)])


def test_fit_refuses_an_unknown_keyword_listing_the_known_ones():
    with pytest.raises(UserError) as info:
        mptrain.fit(torch_model(), [], epochz=1)
    assert "unknown setting epochz (did you mean epochs?); known:" in str(info.value)
    assert "batch_size" in str(info.value)


def test_rl_fit_refuses_a_typo_instead_of_running_the_defaults():
    # It ran 200,000 steps: RLConfig.from_dict dropped the unknown key.
    with pytest.raises(UserError) as info:
        mptrain.rl.fit("CartPole-v1", "a3c", stepz=100)
    message = str(info.value)
    assert message.startswith("rl.fit(): unknown setting stepz (did you mean steps?); known:")
    assert "round_steps" in message and "\n" not in message


def test_errors_from_python_name_the_keyword_not_the_flag():
    with pytest.raises(UserError) as info:
        mptrain.fit(torch_model(), [], workers=0)
    assert "workers must be a positive integer" in str(info.value)
    assert "--workers" not in str(info.value)


# -- resuming ----------------------------------------------------------------------------------

@pytest.mark.parametrize("epochs", [1, 4])
def test_a_resume_with_no_epochs_left_is_refused(epochs):
    resumed = checkpoint_of(TrainConfig(epochs=4), epoch=4)
    with pytest.raises(UserError) as info:
        supervised_config([flags({"epochs": epochs})], checkpoint=resumed,
                          resume_from="runs/b")
    assert str(info.value) == (f"the run in runs/b is already at epoch 4 and --epochs {epochs} "
                               "asks for no more; give --epochs above 4 to train on (e.g. "
                               "--epochs 8)")


def test_a_resume_without_epochs_that_is_done_is_refused():
    resumed = checkpoint_of(TrainConfig(epochs=4), epoch=4)
    with pytest.raises(UserError, match="already at epoch 4 and its own --epochs 4 is done; "
                                        "give --epochs above 4"):
        supervised_config([flags({})], checkpoint=resumed)


def test_a_fedavg_resume_names_rounds():
    resumed = checkpoint_of(TrainConfig(strategy="fedavg", rounds=3, clients=4,
                                        clients_per_round=2), epoch=3)
    with pytest.raises(UserError, match="already at round 3 .* give --rounds above 3"):
        supervised_config([flags({"rounds": 2})], checkpoint=resumed)


def test_an_rl_resume_with_no_steps_left_is_refused():
    resumed = checkpoint_of(RLConfig(steps=30_000, round_steps=10_000), epoch=3)
    with pytest.raises(UserError, match="already at round 3 .* give steps above 30000"):
        rl_config([keywords({"steps": 30_000}, "rl.fit()")], checkpoint=resumed)
    assert rl_config([keywords({"steps": 40_000}, "rl.fit()")], checkpoint=resumed).units == 4


def test_an_rl_run_cut_short_of_a_round_resumes_to_the_steps_asked():
    # A 6,000-step run in rounds of 10,000, resumed to 9,000: "already at round 1 ...
    # give --steps above 10000" (issue 57); its one round held 6,000 steps.
    resumed = checkpoint_of(RLConfig(steps=6_000, round_steps=10_000), epoch=1)
    config = rl_config([keywords({"steps": 9_000}, "rl.fit()")], checkpoint=resumed)
    assert config.units == 2
    assert (config.round_end(1), config.round_size(1)) == (9_000, 3_000)
    with pytest.raises(UserError, match="already at round 1 .* give steps above 6000 "):
        rl_config([keywords({"steps": 6_000}, "rl.fit()")], checkpoint=resumed)
    # Resumed again after that second round, it goes on from 9,000.
    again = checkpoint_of(config, epoch=2)
    later = rl_config([keywords({"steps": 25_000}, "rl.fit()")], checkpoint=again)
    assert [later.round_end(i) for i in (1, 2, 3)] == [9_000, 19_000, 25_000]


def test_an_rl_resume_in_rounds_of_another_size_goes_on_from_the_steps_done():
    # Rounds of 5,000 after three of 10,000 ended at 20,000: round 4 ran no step.
    resumed = checkpoint_of(RLConfig(steps=30_000, round_steps=10_000), epoch=3)
    config = rl_config([keywords({"steps": 40_000, "round_steps": 5_000}, "rl.fit()")],
                       checkpoint=resumed)
    assert config.units == 5 and [config.round_end(i) for i in (3, 4)] == [35_000, 40_000]


def test_rl_resume_bookkeeping_is_no_setting():
    with pytest.raises(UserError, match="unknown setting resumed_step"):
        mptrain.rl.fit("CartPole-v1", "a3c", resumed_step=5)


def test_a_resume_under_another_strategy_names_the_checkpoints():
    # It blamed --sync-every, which the user never gave: the checkpoint's sync setting.
    resumed = checkpoint_of(TrainConfig(strategy="sync", workers=2, sync_every=2), epoch=1)
    with pytest.raises(UserError) as info:
        supervised_config([flags({"strategy": "hogwild", "epochs": 5})], checkpoint=resumed,
                          resume_from="runs/b")
    message = str(info.value)
    assert message.startswith("the checkpoint in runs/b was written by --strategy sync, not "
                              "hogwild")
    assert "sync-every" not in message


def test_a_resume_takes_the_checkpoints_strategy_when_none_is_given():
    resumed = checkpoint_of(TrainConfig(strategy="sync", workers=2, sync_every=2), epoch=1)
    config = supervised_config([flags({"epochs": 5})], checkpoint=resumed)
    assert (config.strategy, config.workers, config.sync_every) == ("sync", 2, 2)


@pytest.mark.parametrize("said, stored, expect", [
    ({"client_fraction": 0.5}, {"clients_per_round": 2}, ("client_fraction", 0.5)),
    ({"clients_per_round": 3}, {"client_fraction": 0.5}, ("clients_per_round", 3)),
    ({"vectorize_clients": "off"}, {"clients_per_round": 2, "vectorize_chunk": 2},
     ("vectorize_chunk", None)),
    ({"server_optimizer": "sgd"}, {"clients_per_round": 2, "server_optimizer": "adam",
                                   "server_betas": "0.9,0.99", "server_tau": 1e-3},
     ("server_betas", None)),
    ({"server_optimizer": "yogi"}, {"clients_per_round": 2, "server_momentum": 0.9},
     ("server_momentum", 0.0)),
])
def test_a_resume_lets_a_said_setting_replace_the_checkpoints_alternative(said, stored,
                                                                          expect):
    # It was refused ('give --clients-per-round or --client-fraction, not both'; '--vectorize-
    # chunk ... drop one of them'), and the user could not drop the checkpoint's setting.
    resumed = checkpoint_of(TrainConfig(strategy="fedavg", rounds=3, clients=4, **stored),
                            epoch=1)
    config = supervised_config([flags(said)], checkpoint=resumed)
    name, value = expect
    assert getattr(config.fedavg, name) == value


def test_a_resume_said_to_stack_drops_the_checkpoints_loader_threads():
    # --loader-workers with --loader stacked is refused ('drop one of them'), and a resume
    # of an auto run with threads could not drop the checkpoint's.
    resumed = checkpoint_of(TrainConfig(loader="auto", loader_workers=3), epoch=1)
    config = supervised_config([flags({"loader": "stacked", "epochs": 3})], checkpoint=resumed)
    assert (config.loader, config.loader_workers) == ("stacked", TrainConfig().loader_workers)


def test_a_resume_keeps_the_checkpoints_chunk_when_stacking_is_said_again():
    resumed = checkpoint_of(TrainConfig(strategy="fedavg", rounds=3, clients=4,
                                        clients_per_round=2, vectorize_clients="on",
                                        vectorize_chunk=2), epoch=1)
    config = supervised_config([flags({"vectorize_clients": "auto"})], checkpoint=resumed)
    assert (config.fedavg.vectorize_clients, config.fedavg.vectorize_chunk) == ("auto", 2)


def torch_model():
    import torch.nn as nn

    return nn.Linear(1, 1)


@pytest.mark.timeout(120)
def test_a_resume_with_nothing_to_do_rewrites_nothing_and_one_that_trains_says_so(
        tmp_path, capsys):
    from user_errors import fail

    from mptrain.cli import main

    out = tmp_path / "b"
    base = ["run", "--data", "linreg", "--out", str(out), "--checkpoint-every", "1"]
    assert main(base + ["--epochs", "2", "--quiet"]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    capsys.readouterr()
    err = fail(["run", "--resume", str(out), "--epochs", "2"], capsys)
    assert f"the run in {out} is already at epoch 2" in err
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    assert main(["run", "--resume", str(out), "--epochs", "3"]) == 0
    assert "resuming from epoch 2 of 3" in capsys.readouterr().out


def test_run_locations_take_the_checkpoints_where_nothing_is_said(tmp_path):
    from mptrain.settings import run_locations

    resumed = Checkpoint(epoch=1, strategy="single", config={}, run={
        "data": "digits", "data_dir": "/old/mnist", "model": "mlp"}, model={}, ranks=[{}],
        metrics=[])
    columns = {"client_column": None, "features": None, "label": None}   # hf:NAME's
    assert run_locations({"model": "digits-cnn"}, resumed, tmp_path) == {
        "data": "digits", "data_dir": None,   # a data dir only goes with mnist
        "model": "digits-cnn", "out": str(tmp_path), **columns}
    assert run_locations({"data": "linreg"}) == {"data": "linreg", "data_dir": None,
                                                 "model": None, "out": None, **columns}


@pytest.mark.parametrize("caller, how", [
    (None, "resume it with mptrain run --resume"),
    ("rl.fit()", "resume it with mptrain.fit(model, data, resume=...)"),
])
def test_an_rl_resume_of_a_supervised_checkpoint_says_how_to_resume_it(caller, how):
    # rl.fit() was sent to 'mptrain run --resume', a command that cannot name its model.
    from mptrain.errors import as_keyword, spelled
    from mptrain.rl.api import resolved_config

    resumed = checkpoint_of(TrainConfig(strategy="sync", workers=2, sync_every=2), epoch=1)
    layer = keywords({}, caller) if caller else flags({})
    with spelled(as_keyword) if caller else contextlib.nullcontext():
        with pytest.raises(UserError) as info:
            resolved_config([layer], resumed, "runs/b")
    assert str(info.value) == ("the checkpoint was written by a supervised run (strategy "
                               f"sync), not an RL one; {how}")
