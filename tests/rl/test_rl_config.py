import re

import pytest

from mptrain.errors import UserError
from mptrain.rl.config import RLConfig


def test_rounds_cover_the_steps():
    config = RLConfig(steps=25_000, round_steps=10_000)
    assert config.units == 3
    assert [config.round_size(i) for i in range(3)] == [10_000, 10_000, 5_000]
    assert config.round_end(2) == 25_000
    assert config.strategy == "a3c" and config.unit == "round"


@pytest.mark.parametrize("changes", [dict(algo="sac"), dict(workers=0), dict(steps=-1),
                                     dict(gamma=1.5), dict(lr=0.0), dict(round_steps=1,
                                                                         workers=2),
                                     dict(algo="dqn", buffer_size=32, batch_size=64),
                                     dict(algo="dqn", policy_every=0),
                                     dict(algo="dqn", target_tau=0.0),
                                     dict(algo="dqn", target_tau=1.5)])
def test_bad_settings_are_refused(changes):
    with pytest.raises(UserError):
        RLConfig(**changes)


def test_round_trip_through_a_dict():
    config = RLConfig(algo="dqn", seed=4, eval_every=2)
    assert RLConfig.from_dict(config.as_dict()) == config


def test_an_unknown_setting_is_refused_naming_the_close_one():
    # It used to be dropped: rl.fit(..., stepz=100) ran 200,000 steps.
    with pytest.raises(UserError) as info:
        RLConfig.from_dict({"stepz": 100})
    message = str(info.value)
    assert "unknown setting --stepz (did you mean --steps?)" in message
    assert "known:" in message and "--round-steps" in message and "\n" not in message


@pytest.mark.parametrize("name, value, kind", [
    ("lr", "0.1", "a string ('0.1') where a number is expected"),
    ("steps", "100", "a string ('100') where a whole number is expected"),
    ("gamma", True, "true/false (True) where a number is expected"),
    ("algo", 3, "a whole number (3) where a name is expected"),
    ("quiet", "yes", "a string ('yes') where true or false is expected"),
])
def test_a_value_of_the_wrong_kind_is_named_as_such(name, value, kind):
    with pytest.raises(UserError, match=re.escape(kind)):
        RLConfig(**{name: value})


@pytest.mark.parametrize("changes", [dict(seed=-1), dict(entropy_coef=-0.1),
                                     dict(max_grad_norm=0.0), dict(worker_timeout=0),
                                     dict(start_method="thread"),
                                     dict(target_return=float("nan")), dict(env="")])
def test_settings_that_went_unchecked_are_refused(changes):
    with pytest.raises(UserError):
        RLConfig(**changes)


def test_one_registry_holds_both_families():
    from mptrain.strategies.registry import ALGOS, STRATEGIES, strategy_class

    assert ALGOS == ("a3c", "dqn", "ppo") and "a3c" not in STRATEGIES
    assert {strategy_class(name).family for name in ALGOS} == {"rl"}
    assert {strategy_class(name).family for name in STRATEGIES} == {"supervised"}


@pytest.mark.parametrize("algo, name, value, users", [
    ("a3c", "buffer_size", 10, "dqn"), ("a3c", "clip_coef", 0.3, "ppo"),
    ("dqn", "n_steps", 5, "a3c or ppo"), ("dqn", "target_kl", 0.02, "ppo"),
    ("ppo", "eps_steps", 100, "dqn"), ("a3c", "batch_size", 32, "dqn or ppo"),
    ("ppo", "target_tau", 0.005, "dqn"), ("a3c", "return_steps", 5, "dqn"),
    ("ppo", "advantage_learning", 0.9, "dqn"),
    ("a3c", "dueling", not RLConfig.dueling, "dqn"),
    ("ppo", "dueling", not RLConfig.dueling, "dqn"),
])
def test_a_setting_the_algorithm_never_reads_is_refused(algo, name, value, users):
    with pytest.raises(UserError, match=f"^--{name.replace('_', '-')} does nothing with "
                                        f"--algo {algo}; it is a setting of --algo {users}$"):
        RLConfig.from_dict({"algo": algo, name: value})


def test_a_resolved_config_of_every_algorithm_passes_again():
    # A checkpoint holds every field, the algorithm's own defaults filled in.
    for algo in ("a3c", "dqn", "ppo"):
        config = RLConfig.from_dict({"algo": algo})
        assert RLConfig.from_dict(config.as_dict()) == config


@pytest.mark.parametrize("algo, name, stored", [
    ("a3c", "envs_per_actor", 4),     # ppo's default before ede0a53: a3c runs stored it
    ("dqn", "update_epochs", 20),     # another algorithm's setting, at an old default
    ("ppo", "buffer_size", 12_345),
])
def test_a_checkpoint_hands_on_only_what_its_algorithm_reads(algo, name, stored):
    # A checkpoint holds every field as its run resolved it; a default of another
    # algorithm's setting changed since must not make the checkpoint unresumable.
    from types import SimpleNamespace

    from mptrain.rl.api import rl_config
    from mptrain.settings import keywords

    saved = {**RLConfig.from_dict({"algo": algo, "steps": 20_000}).as_dict(), name: stored}
    checkpoint = SimpleNamespace(config=saved, strategy=algo, epoch=1, run={})
    config = rl_config([keywords({"steps": 40_000}, "rl.fit()")], checkpoint=checkpoint)
    assert config.algo == algo and config.steps == 40_000
    assert getattr(config, name) == getattr(RLConfig.from_dict({"algo": algo}), name)


def test_ppo_says_why_its_rounds_are_longer_than_round_steps():
    # The README's `--round-steps 5000` showed rounds of 5,120 steps without a word why.
    from mptrain.rl.ppo import rounded_rounds

    config = RLConfig(algo="ppo", workers=2, steps=50_000, round_steps=5_000)
    assert rounded_rounds(config) == ["rounds end at whole rollouts of 512 transitions: "
                                      "--round-steps 5000 gives rounds of about 5,120 steps"]
    assert rounded_rounds(RLConfig(algo="ppo", workers=2, round_steps=5_120)) == []


@pytest.mark.parametrize("damage", [{"round_steps": "x"}, {"resumed_round": "q"},
                                    {"steps": None}, {"round_steps": 0},
                                    {"resumed_step": -5}])
def test_a_checkpoint_whose_counts_are_damaged_is_one_line(damage):
    """Where a resumed run takes up its rounds is counted from the checkpoint's steps and
    rounds before its settings are checked: a damaged one ended the resume in TypeError
    ('<=' not supported between 'int' and 'str')."""
    from mptrain.checkpoint import Checkpoint
    from mptrain.rl.config import resumed_at

    config = {"steps": 2500, "round_steps": 1000, **damage}
    checkpoint = Checkpoint(epoch=3, strategy="dqn", config=config, run={}, model={},
                            ranks=[], metrics=[])
    with pytest.raises(UserError, match="is damaged"):
        resumed_at(checkpoint)
    assert resumed_at(Checkpoint(epoch=3, strategy="dqn", config={"steps": 2500,
                                 "round_steps": 1000}, run={}, model={}, ranks=[],
                                 metrics=[])) == (3, 2500)


def test_hidden_with_a_network_of_ones_own_is_refused_in_one_line():
    # --hidden sizes mptrain's built-in networks; a --net is built as its maker says, so
    # '--net my:make --hidden 32' ran the user's width without a word.
    with pytest.raises(UserError, match=r"^--hidden sizes mptrain's own network; --net "
                                        r"'my_pkg.nets:make' is your network: give it the "
                                        r"width, or leave --hidden out$"):
        RLConfig.from_dict({"algo": "a3c", "net": "my_pkg.nets:make", "hidden": 32})
    RLConfig.from_dict({"algo": "a3c", "hidden": 32})
    RLConfig.from_dict({"algo": "a3c", "net": "my_pkg.nets:make"})
    # The width the algorithm takes anyway passes (a config file's hidden beside a --net),
    # as refuse_unused lets a default through: a3c's is 128, dqn's 256.
    RLConfig.from_dict({"algo": "a3c", "net": "my_pkg.nets:make", "hidden": 128})
    with pytest.raises(UserError, match="--hidden sizes"):
        RLConfig.from_dict({"algo": "dqn", "net": "my_pkg.nets:make", "hidden": 128})


def test_a_checkpoint_of_a_net_with_hidden_resumes_without_it():
    # A checkpoint written before the refusal may hold both; its hidden was never read.
    from mptrain.rl.config import applicable_rl_settings

    stored = dict(RLConfig(algo="dqn", net="my_pkg.nets:make", hidden=32).as_dict())
    config = RLConfig.from_dict(applicable_rl_settings(stored))
    assert config.net == "my_pkg.nets:make" and config.hidden is None
