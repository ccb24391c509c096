"""The accountant is dp-accounting's: the same epsilon for the same q, z, T, delta."""

import pytest

from mptrain.errors import UserError
from mptrain.federated.accounting import PrivacyAccountant

dp_accounting = pytest.importorskip("dp_accounting")


def reference_of_history(kind, history, delta):
    """dp-accounting's own answer for runs of ``(q, z, rounds)``."""
    events = [dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)), n)
        for q, z, n in history]
    accountant = (dp_accounting.rdp.RdpAccountant() if kind == "rdp"
                  else dp_accounting.pld.PLDAccountant())
    accountant.compose(events[0] if len(events) == 1
                       else dp_accounting.ComposedDpEvent(events))
    return accountant.get_epsilon(delta)


def reference(kind, q, z, rounds, delta):
    return reference_of_history(kind, [(q, z, rounds)], delta)


@pytest.mark.parametrize("kind", ["rdp", "pld"])
def test_epsilon_matches_dp_accounting_round_by_round(kind):
    accountant = PrivacyAccountant(kind)
    for _ in range(30):
        accountant.spend(0.1, 1.0)
    assert accountant.rounds == 30 and accountant.history == [(0.1, 1.0, 30)]
    assert accountant.epsilon(1e-5) == pytest.approx(reference(kind, 0.1, 1.0, 30, 1e-5),
                                                     rel=1e-3)


def test_issue_workload_epsilon_to_three_figures():
    # 10,000 clients, 1,000 per round, z = 1, 100 rounds, delta 1e-5.
    accountant = PrivacyAccountant("rdp")
    accountant.spend(0.1, 1.0, rounds=100)
    assert f"{accountant.epsilon(1e-5):.3g}" == f"{reference('rdp', 0.1, 1.0, 100, 1e-5):.3g}"


def test_more_noise_costs_less_and_history_round_trips():
    accountant = PrivacyAccountant("rdp")
    accountant.spend(0.05, 1.0, 10)
    accountant.spend(0.05, 2.0, 5)
    assert accountant.epsilon_after(0.05, 2.0, 1e-5) < accountant.epsilon_after(0.05, 0.5,
                                                                                 1e-5)
    copy = PrivacyAccountant()
    copy.load_state_dict(accountant.state_dict())
    assert copy.history == accountant.history
    assert copy.epsilon(1e-5) == accountant.epsilon(1e-5) > 0
    assert PrivacyAccountant().epsilon(1e-5) == 0.0


def test_unknown_accountant_is_refused():
    with pytest.raises(UserError, match="--accountant"):
        PrivacyAccountant("moments")


@pytest.mark.parametrize("kind", ["rdp", "pld"])
@pytest.mark.parametrize("history", [
    [(0.05, 1.0, 10), (0.05, 2.0, 5), (0.1, 0.7, 3)],
    [(0.0, 1.0, 5)], [(0.1, 0.0, 3)], [(0.0, 1.0, 5), (0.1, 1.0, 4)],
], ids=["mixed", "nobody-sampled", "no-noise", "nobody-then-some"])
def test_each_rounds_figures_asked_once_give_dp_accountings_own_answer(kind, history):
    # The accountant asks dp-accounting for one round's figures once per (q, z) and
    # composes them as dp-accounting does: the answer must be its own, to the last bit,
    # for a history of several (q, z) runs, and where nobody is sampled or there is no noise.
    accountant = PrivacyAccountant(kind)
    for q, z, n in history:
        accountant.spend(q, z, n)
    assert accountant.epsilon(1e-5) == reference_of_history(kind, history, 1e-5)
