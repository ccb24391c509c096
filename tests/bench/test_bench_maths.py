"""The bench's pure parts: which cells, in which order, and the figures derived from runs."""

from pathlib import Path

import pytest

from mptrain.bench.execute import RunRecord, Workload, command_for, record_from
from mptrain.bench.matrix import (Cell, expand, interleave, memory_pass, reference_of,
                                  speedup_baseline, worker_counts)
from mptrain.bench.report import cell_rows, footnotes, render_table, time_header, time_lines
from mptrain.bench.session import BenchSettings
from mptrain.bench.stats import (efficiency, is_unsteady, paired_ratios, speedup, spread,
                                 time_to_accuracy)
from mptrain.errors import UserError


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


def record(cell, speed, ok=True, repeat=0):
    return RunRecord(cell, repeat, ok=ok, samples_per_s=speed if ok else None,
                     error=None if ok else "boom", test_accuracy=0.9 if ok else None)


def test_cell_rows_pair_each_run_with_the_baseline_run_of_its_repeat():
    ref, single, sync = Cell("single", 1, 1, True), Cell("single", 1), Cell("sync", 2)
    records = [record(ref, 10_000, repeat=0), record(ref, 12_000, repeat=1),
               record(single, 16_000, repeat=0), record(single, 18_000, repeat=1),
               record(sync, 19_800, repeat=0), record(sync, 0, ok=False, repeat=1)]
    rows = {row["label"]: row for row in cell_rows([ref, single, sync], records)}
    assert rows["single (1 thread)"]["samples_per_s"]["median"] == 11_000
    # Only repeat 0 has both runs: 19,800 against that repeat's 10,000, not the median 11,000.
    assert rows["sync x2"]["efficiency"]["median"] == pytest.approx(19_800 / 20_000)
    assert rows["sync x2"]["efficiency"]["n"] == 1
    assert rows["sync x2"]["speedup"]["median"] == pytest.approx(19_800 / 16_000)
    assert rows["sync x2"]["speedup_over"] == "single x1"
    assert rows["sync x2"]["efficiency_over"] == "single (1 thread)"
    assert rows["single (1 thread)"]["efficiency"]["median"] == 1
    assert rows["sync x2"]["failed"] == 1 and rows["sync x2"]["error"] == "boom"


def test_machine_drift_cancels_in_the_paired_efficiency():
    """Issue 10 item 11: the machine slowed from repeat to repeat, every cell alike; each
    repeat's ratio is the true 0.95."""
    ref, hogwild = Cell("single", 1, 1, True), Cell("hogwild", 2)
    reference = [8_000, 6_400, 7_100]
    records = [record(ref, speed, repeat=k) for k, speed in enumerate(reference)]
    records += [record(hogwild, 0.95 * 2 * speed, repeat=k) for k, speed in enumerate(reference)]
    row = cell_rows([ref, hogwild], records)[1]
    assert row["efficiency"]["min"] == pytest.approx(0.95)
    assert row["efficiency"]["max"] == pytest.approx(0.95)
    assert not row["efficiency"]["unsteady"]


def test_one_slow_reference_run_shows_as_spread_and_is_marked():
    """The reference alone ran slow in repeat 1 (6.4k instead of 8k): that repeat's ratio is
    off, the median is not, and the spread marks the figure as too wide to trust."""
    ref, hogwild = Cell("single", 1, 1, True), Cell("hogwild", 2)
    records = [record(ref, speed, repeat=k) for k, speed in enumerate((8_000, 6_400, 8_000))]
    records += [record(hogwild, 15_200, repeat=k) for k in range(3)]
    efficiency_ = cell_rows([ref, hogwild], records)[1]["efficiency"]
    assert efficiency_["median"] == pytest.approx(0.95)
    assert efficiency_["max"] == pytest.approx(15_200 / 12_800)
    assert efficiency_["unsteady"]


def test_paired_ratios_skip_repeats_where_either_run_failed():
    stats = paired_ratios({0: 20.0, 1: 30.0, 2: None}, {0: 10.0, 2: 10.0}, speedup)
    assert stats == {"median": 2.0, "min": 2.0, "max": 2.0, "n": 1, "unsteady": False}
    assert paired_ratios({}, {0: 1.0}, speedup)["n"] == 0


@pytest.mark.parametrize("ratios, unsteady", [
    ([1.0, 1.05, 0.95], False),     # spread 0.10 of the median
    ([1.0, 1.2, 0.99], True),       # 0.21
    ([0.92, 1.1], False),           # 0.18
    ([0.5], False),                 # one ratio: no spread to judge
    ([], False),
])
def test_unsteady_when_paired_ratios_spread_over_a_fifth_of_their_median(ratios, unsteady):
    assert is_unsteady(spread(ratios)) is unsteady
    assert paired_ratios(dict(enumerate(ratios)), dict.fromkeys(range(len(ratios)), 1.0),
                         speedup)["unsteady"] is unsteady


def test_unsteady_figures_are_marked_in_the_table_and_named_below_it():
    ref, sync = Cell("single", 1, 1, True), Cell("sync", 2)
    records = [record(ref, 10_000, repeat=k) for k in range(3)]
    records += [record(sync, speed, repeat=k) for k, speed in enumerate((14_000, 20_000, 18_000))]
    rows = cell_rows([ref, sync], records)
    assert rows[1]["efficiency"]["unsteady"] and not rows[0]["efficiency"]["unsteady"]
    table = render_table(rows, None)
    efficiency_column = next(c for c in table.columns if c.header == "eff.")
    assert list(efficiency_column.cells)[1] == "[yellow]0.90 (0.70-1.00) ![/yellow]"
    assert list(efficiency_column.cells)[0] == "1.00 (1.00-1.00)"
    notes = footnotes(rows)
    assert any(note.startswith("! too wide to trust") and "sync x2" in note for note in notes)


@pytest.mark.parametrize("strategies, header", [
    (["sync"], "s/epoch"), (["fedavg"], "s/round"), (["sync", "fedavg"], "s/unit"),
])
def test_time_column_names_its_unit(strategies, header):
    cells = expand(strategies, [2], threads=None)
    rows = cell_rows(cells, [record(cell, 1_000) for cell in cells])
    assert time_header(rows) == header
    assert {row["unit"] for row in rows} == {"round" if s == "fedavg" else "epoch"
                                            for s in strategies}


def test_fedavg_cells_get_their_own_single_thread_reference():
    cells = expand(["sync", "fedavg"], [1, 2], threads=None)
    assert [c.label for c in cells] == ["single (1 thread)", "sync x1", "sync x2",
                                        "fedavg (1 thread)", "fedavg x1", "fedavg x2"]
    fedavg2, sync2 = Cell("fedavg", 2), Cell("sync", 2)
    assert reference_of(fedavg2, cells) == Cell("fedavg", 1, 1, True)
    assert speedup_baseline(fedavg2, cells) == Cell("fedavg", 1)
    assert reference_of(sync2, cells) == Cell("single", 1, 1, True)
    # No `single x1` in the matrix: speed-up over the 1-thread reference instead.
    assert speedup_baseline(sync2, cells) == Cell("single", 1, 1, True)


def test_fedavg_alone_needs_no_single_reference_and_one_thread_runs_once():
    cells = expand(["fedavg"], [1, 2], threads=1)
    assert [c.label for c in cells] == ["fedavg (1 thread)", "fedavg x2, 1 thr"]
    assert speedup_baseline(cells[1], cells) == cells[0]


def test_fedavg_cells_run_rounds_with_the_fedavg_flags_and_no_steps():
    workload = Workload(["--data", "digits"], epochs=3, steps_per_epoch=None,
                        round_options=["--clients", "20", "--partition", "iid"])
    command = command_for(Cell("fedavg", 2), workload, Path("out"))
    assert command[command.index("--rounds") + 1] == "3" and "--epochs" not in command
    assert command[-4:] == ["--clients", "20", "--partition", "iid"]
    workload.steps_per_epoch = 5
    assert "--steps-per-epoch" not in command_for(Cell("fedavg", 2), workload, Path("out"))
    sync = command_for(Cell("sync", 2), workload, Path("out"))
    assert "--epochs" in sync and "--clients" not in sync and "--steps-per-epoch" in sync


def test_each_run_records_the_start_method_it_used():
    workload = Workload([], epochs=1)
    summary = {"train_samples_per_s": 100.0, "start_method": "spawn", "startup_s": 1.0}
    run = record_from(Cell("sync", 2), 0, summary, [], 2.0, None, workload)
    assert run.start_method == "spawn"
    single = record_from(Cell("single", 1), 1, {**summary, "start_method": None}, [], 2.0,
                         None, workload)
    rows = {row["label"]: row for row in cell_rows([Cell("sync", 2), Cell("single", 1)],
                                                   [run, single])}
    assert rows["sync x2"]["start_method"] == "spawn"
    assert rows["single x1"]["start_method"] is None


def settings(**changes):
    base = dict(data="digits", data_dir=None, model=None, strategies=("sync",), workers=None,
                epochs=1, steps=None, repeats=1, threads=None, target_accuracy=None,
                run_options=())
    return BenchSettings(**{**base, **changes})


@pytest.mark.parametrize("changes, message", [
    (dict(clients=10), "--clients applies to fedavg cells only"),
    (dict(partition="iid", local_epochs=2), "--local-epochs, --partition applies to fedavg"),
    (dict(strategies=("sync", "fedavg"), steps=3), "--steps cannot be used with fedavg"),
    (dict(strategies=("fedavg",), clients_per_round=0), "--clients-per-round must be"),
    (dict(strategies=("sync", "bogus")), "unknown bogus"),
])
def test_bad_settings_are_one_line_user_errors(changes, message):
    with pytest.raises(UserError) as error:
        settings(**changes)
    assert message in str(error.value) and "\n" not in str(error.value)


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


def test_unsteady_figures_say_how_many_repeats_to_try():
    ref, sync = Cell("single", 1, 1, True), Cell("sync", 2)
    records = [record(ref, 10_000, repeat=k) for k in range(3)]
    records += [record(sync, speed, repeat=k) for k, speed in enumerate((14_000, 20_000, 18_000))]
    notes = footnotes(cell_rows([ref, sync], records), repeats=3)
    assert any("re-run with --repeats 6 on a quieter machine" in note for note in notes)


@pytest.mark.parametrize("steal_s, noted", [(None, False), (0.0, False), (1.0, False),
                                            (5.0, True)])
def test_hypervisor_steal_is_noted_with_its_seconds(steal_s, noted):
    ref = Cell("single", 1, 1, True)
    rows = cell_rows([ref], [record(ref, 10_000, repeat=k) for k in range(3)])
    notes = footnotes(rows, repeats=3, steal_s=steal_s, wall_s=100.0, cpus=2)
    steal = [note for note in notes if "hypervisor steal" in note]
    assert bool(steal) is noted
    if noted:
        assert steal[0].startswith("! hypervisor steal: 5.0 s of CPU") and "(2.5% of it)" \
            in steal[0]


def timed_run(cell, repeat, speed, compute_s, samples=6_000):
    """A run whose ranks computed ``compute_s`` seconds each over ``samples`` in all."""
    shares = dict(compute=0.9, forward=0.3, backward=0.5, optimizer=0.1, data=0.02,
                  collective=0.08, waiting=0.05)
    return RunRecord(cell, repeat, ok=True, samples_per_s=speed, time_shares=shares,
                     epochs=[{"time_compute": compute_s, "train_samples": samples}])


def test_compute_per_sample_is_paired_with_the_reference_and_a_slowdown_is_noted():
    # The reference computes 1 ms a sample; sync's two workers each compute their 3,000
    # samples in 3.6 s: 1.2 ms a sample, 1.2x -- the cores slowed each other down.
    ref, single, sync = Cell("single", 1, threads=1, reference=True), Cell("single", 1), \
        Cell("sync", 2)
    records = []
    for repeat, drift in enumerate((1.0, 1.5)):   # the machine slows down for repeat 1
        records += [timed_run(ref, repeat, 1_000 / drift, 6.0 * drift),
                    timed_run(single, repeat, 1_400 / drift, 4.5 * drift),
                    timed_run(sync, repeat, 1_500 / drift, 3.6 * drift)]
    rows = cell_rows([ref, single, sync], records)
    by_label = {row["label"]: row for row in rows}
    assert by_label["sync x2"]["compute_per_sample"]["median"] == pytest.approx(1.2)
    assert by_label["single x1"]["compute_per_sample"]["median"] == pytest.approx(0.75)
    lines = time_lines(rows)
    assert "compute 90% (forward 30%, backward 50%, optimizer 10%)" in lines[1]
    assert lines[-1].endswith("; compute per sample 1.20x the 1-thread reference's")
    [note] = [n for n in footnotes(rows) if "slow each other down" in n]
    assert note.startswith("! the workers of sync x2 computed each sample 1.20x slower")
    assert "caps their efficiency near 0.83" in note


def test_no_slowdown_note_when_workers_compute_as_fast_as_one_process():
    ref, hogwild = Cell("single", 1, threads=1, reference=True), Cell("hogwild", 2)
    records = [timed_run(ref, 0, 1_000, 6.0), timed_run(hogwild, 0, 1_900, 3.15)]
    rows = cell_rows([ref, hogwild], records)
    assert not [n for n in footnotes(rows) if "slow each other down" in n]
    # Runs that do not time their steps (fedavg, RL) have no figure, and no note.
    untimed = [RunRecord(ref, 0, ok=True, samples_per_s=1.0),
               RunRecord(hogwild, 0, ok=True, samples_per_s=1.0)]
    assert cell_rows([ref, hogwild], untimed)[1]["compute_per_sample"]["n"] == 0


def test_fedavg_cells_say_which_path_their_clients_trained_on():
    """auto's rule can stack one worker's 10 clients and not two workers' 5 each: a bench
    that compares them says so, as summary.json does for each run."""
    ref, one, two = Cell("fedavg", 1, 1, True), Cell("fedavg", 1), Cell("fedavg", 2)
    summary = {"train_samples_per_s": 10_000.0}
    workload = Workload(run_options=[], epochs=1)
    paths = {ref: "vectorized x10", one: "vectorized x10",
             two: "one client at a time: 5 client(s) per worker per round"}
    records = [record_from(cell, 0, {**summary, "client_path": path}, [], 1.0, None, workload)
               for cell, path in paths.items()]
    rows = cell_rows([ref, one, two], records)
    assert [row["client_path"] for row in rows] == list(paths.values())
    [note] = [n for n in footnotes(rows) if n.startswith("fedavg clients:")]
    assert note == ("fedavg clients: vectorized x10 (fedavg (1 thread), fedavg x1); one "
                    "client at a time: 5 client(s) per worker per round (fedavg x2)")
    plain = [record(Cell("sync", 2), 10_000)]
    assert not [n for n in footnotes(cell_rows([Cell("sync", 2)], plain))
                if n.startswith("fedavg clients:")]
