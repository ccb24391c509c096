"""``AvailabilityConfig.client_turn``: the one place a client's round is decided -- the
local steps it may take, and whether its update reaches the server -- for the trainer, the
stacked cohorts, the virtual clock and the worker's tally alike."""

import pytest

from mptrain.federated.availability import (AvailabilityConfig, ClientTurn, drops_out,
                                            exact_stragglers, local_steps, step_budget)

FULL = 12   # 6 batches x 2 local epochs


def test_a_client_that_does_not_straggle_does_all_its_work_and_reports():
    for settings in (AvailabilityConfig(), AvailabilityConfig(seed=3, drop_stragglers=True)):
        turn = settings.client_turn(round_index=4, client=7, full=FULL)
        assert turn.budget == FULL
        assert turn.reports and not turn.dropped_out and not turn.straggler_dropped


def test_a_straggler_does_part_of_its_work_and_is_heard_unless_stragglers_are_dropped():
    kept = AvailabilityConfig(seed=1, straggler_rate=1.0)
    dropped = AvailabilityConfig(seed=1, straggler_rate=1.0, drop_stragglers=True)
    for round_index in range(20):
        heard, unheard = (settings.client_turn(round_index, 5, FULL)
                          for settings in (kept, dropped))
        # the same draw whether its work is kept or dropped: a dropped straggler's budget
        # is what it would have done (the virtual clock charges it)
        assert heard.budget == unheard.budget == local_steps(1, round_index, 5, 1.0, FULL)
        assert heard.reports and not heard.straggler_dropped
        assert unheard.straggler_dropped and not unheard.reports


def test_a_turn_straggles_exactly_when_its_budget_is_short_of_its_full_work():
    assert not ClientTurn(FULL, FULL, False, False).straggles
    assert ClientTurn(FULL, FULL - 1, False, False).straggles
    assert ClientTurn(FULL, 1, False, False).straggles


def test_a_client_with_one_step_cannot_straggle_so_it_is_never_dropped_as_one():
    turn = AvailabilityConfig(straggler_rate=1.0, drop_stragglers=True).client_turn(0, 0, 1)
    assert turn.budget == 1 and not turn.straggles and turn.reports


def test_a_dropout_does_all_its_work_and_is_not_heard():
    # it trains, then never reports: not a dropped straggler (which need not train at all)
    turn = AvailabilityConfig(dropout_rate=1.0, drop_stragglers=True).client_turn(2, 9, FULL)
    assert turn.budget == FULL and turn.dropped_out
    assert not turn.straggler_dropped and not turn.reports


def test_the_turn_is_the_rule_every_call_site_applied_before_it_existed():
    """The budget was ``step_budget``; the report, "not a dropout and not (a straggler under
    --drop-stragglers)" -- in the virtual clock, in the trainer's ``unheard`` and after
    training; a robust rule trains such a straggler anyway and the report drops it then, as
    the same turn says."""
    settings = AvailabilityConfig(seed=2, dropout_rate=0.3, straggler_rate=0.5,
                                  drop_stragglers=True)
    for round_index in range(15):
        for client in range(40):
            turn = settings.client_turn(round_index, client, FULL)
            steps = step_budget(2, round_index, client, FULL, 0.5)
            silent = drops_out(2, round_index, client, 0.3) or steps < FULL
            assert (turn.budget, turn.reports, turn.straggler_dropped) == \
                (steps, not silent, steps < FULL)


@pytest.mark.parametrize("drop", [False, True])
def test_exact_mode_drops_exactly_its_stragglers_among_the_sample(drop):
    settings = AvailabilityConfig(seed=0, straggler_rate=0.75, straggler_mode="exact",
                                  drop_stragglers=drop, local_epochs=3)
    sampled, full = [3, 8, 21, 40], 3 * 4
    chosen = exact_stragglers(0, 6, sampled, 0.75)
    turns = {c: settings.client_turn(6, c, full, sampled) for c in sampled}
    assert {c for c, t in turns.items() if t.straggles} == chosen and len(chosen) == 3
    assert all(t.budget in (4, 8) for c, t in turns.items() if c in chosen)
    assert {c for c, t in turns.items() if not t.reports} == (chosen if drop else set())


def test_the_run_settings_come_from_its_config():
    from types import SimpleNamespace

    fedavg = SimpleNamespace(dropout_rate=0.1, straggler_rate=0.9, straggler_mode="exact",
                             drop_stragglers=True, local_epochs=20)
    assert AvailabilityConfig.of(SimpleNamespace(seed=5, fedavg=fedavg)) == \
        AvailabilityConfig(5, 0.1, 0.9, "exact", True, 20)
