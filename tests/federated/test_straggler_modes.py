"""Stragglers as FedProx's code draws them (``--straggler-mode exact``): exactly
``K - round(K (1 - P))`` of a round's K clients, each doing a whole number of local epochs
from 1 to E - 1; per-client mode is the draw it always was."""

import pytest

from mptrain.federated.availability import (exact_stragglers, local_steps, step_budget,
                                            straggler_epochs)
from mptrain.federated.client import full_steps


@pytest.mark.parametrize("clients, rate, stragglers", [
    (10, 0.9, 9), (10, 0.5, 5), (10, 0.0, 0), (10, 1.0, 10), (4, 0.75, 3), (7, 0.1, 1),
    (10, 0.05, 0),    # round(9.5) = 10 finish: Python's rounding, as FedProx's code
])
def test_exactly_the_papers_share_of_the_sampled_clients_straggle(clients, rate, stragglers):
    sampled = list(range(100, 100 + 3 * clients, 3))
    for round_index in range(20):
        chosen = exact_stragglers(0, round_index, sampled, rate)
        assert len(chosen) == stragglers and chosen <= set(sampled)


def test_who_straggles_is_seeded_and_varies_by_round_not_by_who_asks():
    sampled = [3, 8, 21, 40, 55]
    first = exact_stragglers(1, 4, sampled, 0.6)
    assert first == exact_stragglers(1, 4, list(reversed(sampled)), 0.6)
    rounds = {exact_stragglers(1, r, sampled, 0.6) for r in range(30)}
    assert len(rounds) > 3                         # another round, other stragglers
    assert exact_stragglers(2, 4, sampled, 0.6) != first or \
        exact_stragglers(2, 5, sampled, 0.6) != exact_stragglers(1, 5, sampled, 0.6)


def test_a_straggler_does_one_to_all_but_one_whole_epochs():
    epochs = [straggler_epochs(0, r, c, 20) for r in range(30) for c in range(40)]
    assert min(epochs) == 1 and max(epochs) == 19 and set(epochs) == set(range(1, 20))
    assert {straggler_epochs(0, r, 0, 2) for r in range(50)} == {1}


def test_the_budget_is_whole_epochs_for_exact_stragglers_and_full_for_the_others():
    sampled, full = list(range(10)), full_steps(samples=45, batch_size=10, local_epochs=20)
    chosen = exact_stragglers(0, 2, sampled, 0.9)
    budgets = {c: step_budget(0, 2, c, full, 0.9, "exact", 20, sampled) for c in sampled}
    assert [c for c in sampled if budgets[c] == full] == sorted(set(sampled) - chosen)
    assert all(budgets[c] % 5 == 0 and 5 <= budgets[c] <= full - 5 for c in chosen)
    # per-client: the draw of every run before the mode existed
    assert [step_budget(0, r, 3, full, 0.5) for r in range(30)] == \
        [local_steps(0, r, 3, 0.5, full) for r in range(30)]
