"""The robust server round on a table, without processes: cut among any number of workers
it gives the bits of the whole-row rule, skips the slots that did not report, and the decision
survives its trip through shared memory."""

import pytest
import torch

from mptrain.federated.aggregate import column_slice
from mptrain.federated.robust import blocks, row_wise
from mptrain.federated.robust.attacks import alie_rows_
from mptrain.federated.robust.rules import RobustRule
from mptrain.federated.robust.spec import parse_aggregator
from mptrain.federated.robust.table import (aggregate_slice, decide_round, forge_alie_slice_,
                                            reporting_slots)
from mptrain.strategies.fedavg.decision_cell import DecisionCell
from robust_aggregate import aggregate

RULES = ["mean", "median", "trimmed-mean:0.2", "krum:2", "multi-krum:2,4", "bulyan:1",
         "norm-bound:0.5", "geometric-median"]


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    """Blocks of 1,000 columns: several blocks, and slices that cut through them."""
    monkeypatch.setattr(blocks, "BLOCK_COLUMNS", 1000)


def table_and_weights(rows=10, numel=7_001, seed=0):
    generator = torch.Generator().manual_seed(seed)
    table = torch.randn(rows, numel, generator=generator)
    weights = [float(w) for w in torch.randint(1, 9, (rows,), generator=generator)]
    weights[3] = 0.0      # a client that dropped out
    table[3] = float("nan")  # ... whose slot holds garbage that must never be read
    return table, weights


def server_round(rule, table, weights, center, workers):
    """What the workers do between their barriers, one worker after another."""
    kept = reporting_slots(weights)
    kept_weights = [weights[s] for s in kept]
    plan = None
    if rule.row_wise:
        cell = DecisionCell(len(weights))
        cell.write(decide_round(rule, table, kept, kept_weights, center), len(kept))
        plan = cell.read()
    return torch.cat([aggregate_slice(rule, table, kept, kept_weights,
                                      column_slice(table.shape[1], workers, rank), center,
                                      plan)
                      for rank in range(workers)])


@pytest.mark.parametrize("text", RULES)
def test_any_number_of_workers_gives_the_whole_rows_bits(text):
    table, weights = table_and_weights()
    center = 0.1 * torch.randn(table.shape[1], generator=torch.Generator().manual_seed(9))
    rule = RobustRule(parse_aggregator(text), 9)
    kept = reporting_slots(weights)
    expected, _ = aggregate(rule, table[kept], [weights[s] for s in kept], center)
    for workers in (1, 2, 3):
        result = server_round(rule, table, weights, center, workers)
        assert torch.isfinite(result).all(), text
        if rule.row_wise:   # the Gram sums over blocks: equal to rounding, decisions equal
            assert torch.allclose(result, expected, atol=1e-6), (text, workers)
        else:
            assert torch.equal(result, expected), (text, workers)
    one, two, three = (server_round(rule, table, weights, center, w) for w in (1, 2, 3))
    assert torch.equal(one, two) and torch.equal(one, three), text


def test_plan_cell_round_trips_a_plan():
    rule = RobustRule(parse_aggregator("multi-krum:1,3"), 6)
    table = torch.randn(6, 40, generator=torch.Generator().manual_seed(4))
    plan = decide_round(rule, table, range(6), [1.0, 2.0, 3.0, 1.0, 1.0, 1.0],
                      torch.zeros(40))
    cell = DecisionCell(8)
    cell.write(plan, 6)
    assert cell.read() == plan
    bounded = RobustRule(parse_aggregator("norm-bound:0.1"), 6).decide(
        row_wise.gram_matrix(table), [1.0] * 6)
    cell.write(bounded, 6)
    assert cell.read() == bounded and bounded.bounded == 6


def test_alie_forged_on_slices_equals_forged_on_whole_rows():
    table, _ = table_and_weights(rows=8, numel=5_000)
    whole = table.clone()
    alie_rows_(whole, honest=[0, 1, 2, 4, 5], malicious=[6, 7], z=0.4)
    for rank in range(3):
        forge_alie_slice_(table, [0, 1, 2, 4, 5], [6, 7], column_slice(5_000, 3, rank), 0.4)
    assert torch.equal(table[:3], whole[:3]) and torch.equal(table[4:], whole[4:])
