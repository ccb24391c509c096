"""The bench's pure parts: which cells, in which order, and the figures derived from runs."""

import pytest

from mptrain.bench.execute import RunRecord
from mptrain.bench.matrix import Cell, expand, interleave, memory_pass, worker_counts
from mptrain.bench.report import cell_rows
from mptrain.bench.stats import efficiency, speedup, spread, time_to_accuracy


@pytest.mark.parametrize("requested, cores, expected", [
    (None, 2, [1, 2]), (None, 8, [1, 2, 8]), ([4, 1, 4], 2, [1, 4]), (None, 1, [1, 2]),
])
def test_worker_counts(requested, cores, expected):
    assert worker_counts(requested, cores) == expected


def test_expand_adds_the_reference_and_runs_single_once():
    cells = expand(["single", "sync", "ddp"], [1, 2], threads=None)
    assert cells[0] == Cell("single", 1, threads=1, reference=True)
    assert [c.label for c in cells[1:]] == ["single x1", "sync x1", "sync x2", "ddp x1", "ddp x2"]


def test_expand_drops_single_when_it_equals_the_reference():
    cells = expand(["single", "hogwild"], [2], threads=1)
    assert [c.strategy for c in cells] == ["single", "hogwild"]
    assert cells[0].reference


def test_interleave_is_round_robin():
    a, b, c = Cell("single", 1), Cell("sync", 2), Cell("ddp", 2)
    assert interleave([a, b, c], 2) == [(0, a), (0, b), (0, c), (1, a), (1, b), (1, c)]


def test_memory_pass_is_one_more_run_per_cell_numbered_after_the_timed_ones():
    a, b = Cell("single", 1), Cell("sync", 2)
    assert memory_pass([a, b], 3) == [(3, a), (3, b)]


def test_spread_ignores_missing_values():
    assert spread([3.0, None, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3}
    assert spread([None]) == {"median": None, "min": None, "max": None, "n": 0}


def test_efficiency_and_speedup():
    assert efficiency(18_000, 2, 10_000) == pytest.approx(0.9)
    assert efficiency(None, 2, 10_000) is None
    assert speedup(15_000, 10_000) == pytest.approx(1.5)


def test_time_to_accuracy_counts_start_up():
    epochs = [{"test_accuracy": 0.8, "elapsed_s": 2.0}, {"test_accuracy": 0.95, "elapsed_s": 4.0}]
    assert time_to_accuracy(epochs, 0.9, run_start_offset_s=1.5) == pytest.approx(5.5)
    assert time_to_accuracy(epochs, 0.99, run_start_offset_s=1.5) is None


def record(cell, speed, ok=True):
    return RunRecord(cell, 0, ok=ok, samples_per_s=speed if ok else None,
                     error=None if ok else "boom", test_accuracy=0.9 if ok else None)


def test_cell_rows_derive_speedup_and_efficiency_from_medians():
    ref, single, sync = Cell("single", 1, 1, True), Cell("single", 1), Cell("sync", 2)
    records = [record(ref, 10_000), record(ref, 12_000), record(ref, 11_000),
               record(single, 16_000), record(sync, 19_800), record(sync, 0, ok=False)]
    rows = {row["label"]: row for row in cell_rows([ref, single, sync], records)}
    assert rows["single (1 thread)"]["samples_per_s"]["median"] == 11_000
    assert rows["sync x2"]["efficiency"] == pytest.approx(19_800 / 22_000)
    assert rows["sync x2"]["speedup"] == pytest.approx(19_800 / 16_000)
    assert rows["sync x2"]["failed"] == 1 and rows["sync x2"]["error"] == "boom"


def test_times_come_from_timed_runs_and_memory_from_sampled_ones():
    ref, sync = Cell("single", 1, 1, True), Cell("sync", 2)
    timed = [RunRecord(sync, r, ok=True, samples_per_s=speed)
             for r, speed in enumerate((20_000, 21_000))]
    sampled = RunRecord(sync, 2, ok=True, samples_per_s=15_000, peak_rss_bytes=900,
                        peak_pss_bytes=600, memory_sampled=True)
    failed_memory_run = RunRecord(ref, 2, ok=False, error="boom", memory_sampled=True)
    records = [record(ref, 10_000), *timed, sampled, failed_memory_run]
    rows = {row["label"]: row for row in cell_rows([ref, sync], records)}
    assert rows["sync x2"]["samples_per_s"] == {"median": 20_500, "min": 20_000,
                                                "max": 21_000, "n": 2}
    assert rows["sync x2"]["runs"] == 2
    assert rows["sync x2"]["peak_pss_bytes"]["median"] == 600
    assert rows["sync x2"]["peak_rss_bytes"]["median"] == 900
    assert rows["single (1 thread)"]["peak_pss_bytes"]["n"] == 0
    assert rows["single (1 thread)"]["failed"] == 1
