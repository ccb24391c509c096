"""One worker's RobustWorker driven without processes (one rank: its barriers are
no-ops)."""

import threading

import pytest
import torch

from mptrain.federated.robust.settings import robust_settings
from mptrain.strategies.fedavg.decision_cell import DecisionCell
from mptrain.strategies.fedavg.robust_worker import RobustWorker


def settings(aggregator="mean", fraction=0.0, attack=None, clients=10, per_round=10, seed=0):
    return robust_settings(aggregator, fraction, attack, clients, per_round, seed)


def server(aggregator, fraction=0.0, attack=None, clients=10, per_round=10):
    s = settings(aggregator, fraction, attack, clients, per_round)
    return RobustWorker(s, DecisionCell(per_round), seed=0, classes=10)


def test_client_side_of_each_attack():
    attacked = server("mean", 0.3, "sign-flip")
    bad = sorted(attacked.settings.malicious)
    good = next(c for c in range(10) if c not in bad)
    center, row = torch.zeros(3), torch.tensor([1.0, 2.0, 3.0])
    attacked.send_(good, row, center, 0)
    assert row.tolist() == [1.0, 2.0, 3.0]
    attacked.send_(bad[0], row, center, 0)
    assert row.tolist() == [-1.0, -2.0, -3.0]
    assert attacked.trains(bad[0]) and attacked.targets(bad[0]) is None
    flipping = server("mean", 0.3, "label-flip")
    assert flipping.targets(bad[0])(torch.tensor([0, 9])).tolist() == [9, 0]
    assert flipping.targets(good) is None
    forging = server("median", 0.3, "alie")
    assert not forging.trains(bad[0]) and forging.trains(good)
    row = torch.tensor([5.0, 5.0, 5.0])
    forging.send_(bad[0], row, center, 0)
    assert row.tolist() == [0.0, 0.0, 0.0]   # the global model, forged at the server


def round_table(robust, sampled, weights, honest_value=1.0, numel=50):
    table = torch.full((len(sampled), numel), honest_value)
    table += 0.01 * torch.randn(len(sampled), numel, generator=torch.Generator().manual_seed(1))
    center = torch.zeros(numel)
    for slot, client in enumerate(sampled):
        robust.send_(client, table[slot], center, 0)
    return table, center


def lone_rank_round(robust):
    """A round of 10 clients, every one reporting, on one rank: (table, aggregate, metrics)."""
    sampled, weights = list(range(10)), [1.0] * 10
    table, center = round_table(robust, sampled, weights)
    average, metrics = robust.aggregate(table, weights, sampled, center, slice(0, 50), 0,
                                        lambda: None)
    return table, average, metrics


def test_server_round_counts_attackers_sampled_and_selected():
    robust = server("krum:2", 0.2, "gaussian:50")
    _, average, metrics = lone_rank_round(robust)
    assert metrics["malicious"] == metrics["malicious_reported"] == 2
    assert metrics["malicious_selected"] == 0 and metrics["selected"] == 1
    assert (average - 1.0).abs().max() < 0.05
    assert metrics["update_norm_median"] == pytest.approx(50 ** 0.5, rel=0.05)


def test_alie_rows_are_forged_before_the_rule():
    robust = server("mean", 0.2, "alie:2")
    table, _, metrics = lone_rank_round(robust)
    bad = sorted(robust.settings.malicious)
    honest = [s for s in range(10) if s not in bad]
    forged = table[honest].double().mean(0) + 2 * table[honest].double().std(0)
    assert torch.allclose(table[bad[0]].double(), forged, atol=1e-6)
    assert metrics["malicious_reported"] == 2


def test_a_round_with_too_few_reports_is_skipped_and_says_why():
    robust = server("bulyan:1", per_round=10)
    weights = [1.0] * 5 + [0.0] * 5          # half dropped out
    table, center = round_table(robust, list(range(10)), weights)
    average, metrics = robust.aggregate(table, weights, list(range(10)), center,
                                        slice(0, 50), 0, lambda: None)
    assert average is None
    assert metrics["skipped"] == "5 clients reported; bulyan with F=1 needs more than " \
                                 "4F+3 = 7"
    nobody, _ = robust.aggregate(table, [0.0] * 10, list(range(10)), center, slice(0, 50),
                                 0, lambda: None)
    assert nobody is None


def run_ranks(robust, table, weights, sampled, center, ranks):
    """``robust.aggregate`` on ``ranks`` threads sharing ``table`` (each its slice of the
    columns, a real barrier between them, bounded); the aggregate and rank 0's metrics."""
    from mptrain.federated.aggregate import column_slice

    barrier = threading.Barrier(ranks, timeout=10)
    out, results = torch.empty(table.shape[1]), {}

    def rank(r):
        part = column_slice(table.shape[1], ranks, r)
        results[r] = robust.aggregate(table, weights, sampled, center, part, r,
                                      barrier.wait)
        if results[r][0] is not None:
            out[part] = results[r][0]

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(ranks)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(results) == ranks
    return out, results[0][1]


@pytest.mark.parametrize("aggregator", ["geometric-median", "krum:2", "median", "mean"])
@pytest.mark.parametrize("ranks", [1, 2])
def test_a_forged_alie_update_past_float32_is_dropped_like_any_non_finite_update(
        aggregator, ranks):
    # mean + Z std overflows float32 (Z 1e38, std ~10): the forged rows are inf. They
    # went into the rule as they were: the geometric median and the mean turned the
    # model to NaN, Krum scored NaNs.
    robust = server(aggregator, 0.2, "alie:1e38")
    sampled, weights = list(range(10)), [1.0] * 10
    table = 10 * torch.randn(10, 50, generator=torch.Generator().manual_seed(3))
    center = torch.zeros(50)
    for slot, client in enumerate(sampled):
        robust.send_(client, table[slot], center, 0)
    bad = sorted(robust.settings.malicious)
    honest = [slot for slot in sampled if slot not in bad]
    expected = robust.rule.combine(table[honest], [1.0] * 8) if aggregator in (
        "median", "mean") else None
    average, metrics = run_ranks(robust, table, weights, sampled, center, ranks)
    assert torch.isfinite(average).all()
    assert metrics["forged_nonfinite"] == 2 and metrics["malicious_reported"] == 0
    assert metrics["malicious"] == 2 and metrics.get("malicious_selected", 0) == 0
    if expected is not None:
        assert torch.equal(average, expected)    # the honest rows' rule, as if alone
    # Forged updates that fit are kept, and say nothing of being dropped.
    fitting = server(aggregator, 0.2, "alie:1")
    for slot, client in enumerate(sampled):
        fitting.send_(client, table[slot], center, 0)
    _, metrics = run_ranks(fitting, table, weights, sampled, center, ranks)
    assert "forged_nonfinite" not in metrics and metrics["malicious_reported"] == 2
