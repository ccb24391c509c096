"""fedavg's refusals of a robust rule or an attack: the combinations whose guarantees would
not hold, and a round's table that does not fit (shared, or gathered to rank 0)."""

import pytest

from mptrain.errors import UserError
from mptrain.federated.robust.settings import robust_settings
from mptrain.strategies.fedavg.refusals import (gathered_memory_refusal, refuse_combinations,
                                                table_refusal)


def settings(aggregator="mean", fraction=0.0, attack=None, clients=10, per_round=10, seed=0):
    return robust_settings(aggregator, fraction, attack, clients, per_round, seed)


def test_dp_and_scaffold_refuse_robust_rules_and_attacks():
    with pytest.raises(UserError, match="--aggregator median with --dp-clip"):
        refuse_combinations(settings("median"), dp=True, scaffold=False)
    with pytest.raises(UserError, match="--attack gaussian with --scaffold"):
        refuse_combinations(settings("mean", 0.2, "gaussian"), dp=False, scaffold=True)
    refuse_combinations(settings(), dp=True, scaffold=True)   # plain FedAvg: fine


def test_table_refusal_gives_the_figures():
    text = table_refusal(settings("krum:2"), 1000, 1_000_000, 1 << 30, True)
    assert "1000 clients x 1,000,000 parameters x 4 bytes = 3.7 GiB, over the " \
           "1.0 GiB limit" in text
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
