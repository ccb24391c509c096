"""Real fedavg runs (tiny data, one process) of what the audit of issue 41 found: what a
run with a robust rule or an attack reports and weighs, end to end."""

import sys
from pathlib import Path

import pytest
import torch

import mptrain

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "strategies"))
from fedavg_workload import RUN, make_data, make_model, make_test_data  # noqa: E402

pytestmark = pytest.mark.timeout(180)
ATTACKED = dict(clients=12, clients_per_round=10, malicious_fraction=0.25)


def fit(**options):
    return mptrain.fit(make_model(), make_data(), make_test_data(),
                       **{**RUN, "workers": 1, **ATTACKED, **options})


def test_an_alie_update_past_float32_is_dropped_counted_and_named(capsys):
    # At lr 20 the honest updates spread by more than 1 in some coordinate: Z std with
    # Z 3e38 is past float32 and the forged rows are inf (the geometric median made the
    # model NaN from them).
    result = fit(aggregator="geometric-median", attack="alie:3e38", lr=20.0, rounds=2,
                 quiet=False)
    assert all(torch.isfinite(p).all() for p in result.model.state_dict().values())
    rows = [m.as_dict() for m in result.rounds]
    assert all(row["forged_nonfinite"] == row["malicious"] == 3 for row in rows)
    assert all(row["malicious_reported"] == 0 for row in rows)
    shown = capsys.readouterr()
    assert "round 1: ALIE's forged update (mean + Z std) is past float32; its 3 " \
           "attacker(s) were dropped" in shown.out + shown.err
