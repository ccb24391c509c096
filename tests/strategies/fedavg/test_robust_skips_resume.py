"""The count of rounds a rule skipped (too few reports for Krum's F) is the run's, not the
process's: a resumed run carries on from its checkpoint's count, and a checkpoint written
before the count was kept still resumes (counting from there)."""


import pytest

import mptrain
from mptrain.checkpoint import load, save

from fedavg_workload import RUN, make_data, make_model, make_test_data  # noqa: E402

pytestmark = pytest.mark.timeout(180)
#: Krum with F = 3 needs 9 of the 10 sampled clients: with 30% dropping out most rounds
#: have too few.
SKIPPING = dict(clients=12, clients_per_round=10, aggregator="krum:3", dropout_rate=0.3,
                rounds=6)


def fit(**options):
    return mptrain.fit(make_model(), make_data(), make_test_data(),
                       **{**RUN, "workers": 2, **SKIPPING, **options})


def skipped_in(result, rounds) -> int:
    return sum(1 for m in result.rounds[rounds] if m.as_dict().get("skipped"))


def test_a_resumed_run_counts_the_rounds_skipped_before_its_checkpoint(tmp_path):
    whole = fit(out=tmp_path / "whole")
    before = skipped_in(whole, slice(0, 3))
    assert before and skipped_in(whole, slice(3, 6))   # skips on both sides of the cut
    part = tmp_path / "part"
    fit(rounds=3, out=part, checkpoint_every=1)
    resumed = fit(resume=part, out=part)
    assert resumed.summary["rounds_skipped"] == whole.summary["rounds_skipped"] \
        == skipped_in(whole, slice(0, 6))


def test_a_checkpoint_without_the_count_still_resumes(tmp_path):
    whole = fit(out=tmp_path / "whole")
    part = tmp_path / "part"
    fit(rounds=3, out=part, checkpoint_every=1)
    old = load(part)
    assert old.ranks[0].pop("rounds_skipped") == skipped_in(whole, slice(0, 3))
    save(part, old)   # as checkpoints before the count was kept
    resumed = fit(resume=part, out=part)
    assert resumed.summary["rounds_skipped"] == skipped_in(whole, slice(3, 6))
