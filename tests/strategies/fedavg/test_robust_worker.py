"""The settings of --aggregator/--attack together, and one worker's RobustServer driven
without processes (one rank: its barriers are no-ops)."""

import threading

import pytest
import torch

from mptrain.errors import UserError
from mptrain.federated.robust.table import PlanCell
from mptrain.strategies.fedavg.robust_worker import (RobustServer, gathered_memory_refusal,
                                             refuse_combinations, robust_settings,
                                             table_refusal)


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


def test_dp_and_scaffold_refuse_robust_rules_and_attacks():
    with pytest.raises(UserError, match="--aggregator median with --dp-clip"):
        refuse_combinations(settings("median"), dp=True, scaffold=False)
    with pytest.raises(UserError, match="--attack gaussian with --scaffold"):
        refuse_combinations(settings("mean", 0.2, "gaussian"), dp=False, scaffold=True)
    refuse_combinations(settings(), dp=True, scaffold=True)   # plain FedAvg: fine


def test_table_refusal_gives_the_figures():
    text = table_refusal(settings("krum:2"), 1000, 1_000_000, 1 << 30, True)
    assert "1000 clients x 1,000,000 parameters x 4 bytes = 3,814.7 MiB, over the " \
           "1,024.0 MiB limit" in text
    # Under torchrun the table is rank 0's, gathered: the same figures, the same limit.
    assert table_refusal(settings("median"), 10, 10, 1 << 30, False) is None
    assert table_refusal(settings("median"), 10, 10, 1 << 30, True) is None
    assert "--attack gaussian needs every client's update in one table on rank 0: " \
        "10 clients x 10 parameters x 4 bytes = 400 B, over the 1 B limit" in table_refusal(
            settings("mean", 0.2, "gaussian"), 10, 10, 1, False)
    assert table_refusal(settings(), 10, 10, 1, False) is None


def test_the_gathered_table_is_refused_when_rank_zeros_machine_cannot_hold_it():
    # 10 rows of 1,000 floats = 40,000 B on rank 0; 2 other ranks there hold 3 rows each
    # (10 rows over 4 ranks: at most 3) of 1,002 floats (the weight's two columns) =
    # 24,048 B; the gather's buffers: a block of 3 rows on each of the 3 ranks there, and
    # on rank 0 one more per rank (4) = 7 x 3 x 4,008 = 84,168 B.
    need = 40_000 + 24_048 + 84_168
    assert gathered_memory_refusal(settings("median"), 10, 1000, 4, 3, need) is None
    text = gathered_memory_refusal(settings("median"), 10, 1000, 4, 3, need - 1)
    assert text == ("--aggregator median gathers every client's update to rank 0: 10 clients "
                    "x 1,000 parameters x 4 bytes = 39.1 KiB + 23.5 KiB for its other 2 "
                    "rank(s)' own rows + 82.2 KiB for the gather's buffers on rank 0's "
                    "machine, which has 144.7 KiB of memory available; sample fewer "
                    "--clients-per-round, or free memory there")
    # Rank 0 alone on its machine: its table and its gather's buffers (5 blocks).
    assert "39.1 KiB + 58.7 KiB for the gather's buffers on rank 0's machine" in \
        gathered_memory_refusal(settings("median"), 10, 1000, 4, 1, 100_119)
    assert gathered_memory_refusal(settings("median"), 10, 1000, 4, 1, 100_120) is None
    # The buffers stop growing at the gather's bound: 64 MiB a gather at rank 0 (4 blocks
    # of 4 rows of 4 MB), and its own block.
    big = gathered_memory_refusal(settings("median"), 1000, 1_000_000, 4, 1, 0)
    assert "+ 76.3 MiB for the gather's buffers" in big
    # Plain mean without an attack gathers nothing.
    assert gathered_memory_refusal(settings(), 10, 1000, 4, 3, 0) is None


def server(aggregator, fraction=0.0, attack=None, clients=10, per_round=10):
    s = settings(aggregator, fraction, attack, clients, per_round)
    return RobustServer(s, PlanCell(per_round), seed=0, classes=10)


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


def test_server_round_counts_attackers_sampled_and_selected():
    robust = server("krum:2", 0.2, "gaussian:50")
    sampled = list(range(10))
    weights = [1.0] * 10
    table, center = round_table(robust, sampled, weights)
    average, metrics = robust.aggregate(table, weights, sampled, center, slice(0, 50), 0,
                                        lambda: None)
    assert metrics["malicious"] == metrics["malicious_reported"] == 2
    assert metrics["malicious_selected"] == 0 and metrics["selected"] == 1
    assert (average - 1.0).abs().max() < 0.05
    assert metrics["update_norm_median"] == pytest.approx(50 ** 0.5, rel=0.05)


def test_alie_rows_are_forged_before_the_rule():
    robust = server("mean", 0.2, "alie:2")
    sampled = list(range(10))
    weights = [1.0] * 10
    table, center = round_table(robust, sampled, weights)
    average, metrics = robust.aggregate(table, weights, sampled, center, slice(0, 50), 0,
                                        lambda: None)
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
