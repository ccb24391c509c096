import pytest

from mptrain.errors import UserError
from mptrain.rl.config import RLConfig


def test_rounds_cover_the_steps():
    config = RLConfig(steps=25_000, round_steps=10_000)
    assert config.units == 3
    assert [config.round_size(i) for i in range(3)] == [10_000, 10_000, 5_000]
    assert config.round_end(2) == 25_000
    assert config.strategy == "a3c" and config.unit == "round"


@pytest.mark.parametrize("changes", [dict(algo="ppo"), dict(workers=0), dict(steps=-1),
                                     dict(gamma=1.5), dict(lr=0.0), dict(round_steps=1,
                                                                         workers=2),
                                     dict(algo="dqn", buffer_size=32, batch_size=64),
                                     dict(algo="dqn", policy_every=0)])
def test_bad_settings_are_refused(changes):
    with pytest.raises(UserError):
        RLConfig(**changes)


def test_round_trip_through_a_dict():
    config = RLConfig(algo="dqn", seed=4, eval_every=2)
    assert RLConfig.from_dict({**config.as_dict(), "unknown": 1}) == config


def test_one_registry_holds_both_families():
    from mptrain.strategies.registry import ALGOS, STRATEGIES, strategy_class

    assert ALGOS == ("a3c", "dqn") and "a3c" not in STRATEGIES
    assert {strategy_class(name).family for name in ALGOS} == {"rl"}
    assert {strategy_class(name).family for name in STRATEGIES} == {"supervised"}
