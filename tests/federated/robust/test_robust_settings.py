"""The settings of --aggregator/--malicious-fraction/--attack, checked together."""

import pytest

from mptrain.errors import UserError
from mptrain.federated.robust.settings import robust_settings


def settings(aggregator="mean", fraction=0.0, attack=None, clients=10, per_round=10, seed=0):
    return robust_settings(aggregator, fraction, attack, clients, per_round, seed)


def test_plain_mean_without_attack_leaves_the_server_alone():
    plain = settings()
    assert not plain.active and not plain.needs_table and not plain.malicious
    assert settings("mean", 0.2, "sign-flip").active
    assert settings("mean", 0.2, "sign-flip").needs_table
    assert settings("mean", 0.2, "alie").needs_table
    assert settings("median").needs_table


@pytest.mark.parametrize("args, words", [
    (("mean", 0.2, None), "--malicious-fraction needs --attack"),
    (("mean", 0.0, "gaussian"), "needs attackers: add --malicious-fraction"),
    (("mean", 1.0, "gaussian"), "0 <= P < 1"),
    (("krum:5", 0.0, None), "more than 2F+2 = 12 clients per round, got 10")])
def test_settings_refused_in_one_line(args, words):
    with pytest.raises(UserError) as err:
        settings(*args)
    assert words in str(err.value)
