"""`mptrain bench` end to end on a tiny workload: files, schema, failures as values."""

import csv
import json

import pytest
import torch

from mptrain.bench import session
from mptrain.cli import main


def bench(args):
    try:
        return main(["bench", *args])
    except SystemExit as exit_:
        return exit_.code


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_bench_writes_table_json_csv_and_plot(tmp_path, capsys):
    out = tmp_path / "bench"
    # 30 steps of digits reach 45-75% test accuracy (chance: 10%), so a 30% target fails if
    # the cells stop learning.
    code = bench(["--data", "digits", "--strategies", "sync", "--workers", "2",
                  "--epochs", "1", "--steps", "30", "--repeats", "2",
                  "--time-to-accuracy", "0.3", "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "sync x2" in printed and "single (1 thread)" in printed and "s/epoch" in printed
    assert "paired ratios" in printed

    report = json.loads((out / "bench.json").read_text())
    assert {"usable_cores", "torch"} <= set(report["machine"])
    assert "start_method" not in report["machine"]  # per run and per cell instead
    labels = [cell["label"] for cell in report["cells"]]
    assert labels == ["single (1 thread)", "sync x2"]
    assert len(report["runs"]) == 3 * len(labels)  # 2 timed, 1 sampled for memory
    assert sum(run["memory_sampled"] for run in report["runs"]) == len(labels)
    assert {run["start_method"] for run in report["runs"] if run["cell"] == "sync x2"} == {"fork"}
    assert {run["start_method"] for run in report["runs"] if run["cell"] != "sync x2"} == {None}
    for cell in report["cells"]:
        assert cell["test_accuracy"]["min"] > 0.3
        assert cell["time_to_accuracy_s"]["n"] == 2
    sync = report["cells"][1]
    assert sync["start_method"] == "fork" and report["cells"][0]["start_method"] is None
    assert sync["samples_per_s"]["n"] == 2
    assert sync["efficiency"]["n"] == 2 and sync["efficiency"]["median"] > 0
    assert sync["efficiency"]["min"] <= sync["efficiency"]["median"] <= sync["efficiency"]["max"]
    assert isinstance(sync["efficiency"]["unsteady"], bool)
    # No `single x1` in the matrix: the speed-up is over the 1-thread reference too.
    assert sync["efficiency_over"] == sync["speedup_over"] == "single (1 thread)"
    assert sync["speedup"]["median"] == pytest.approx(2 * sync["efficiency"]["median"])
    assert sync["peak_pss_bytes"]["median"] > 0
    # Where the time went: compute, data and collectives make up each run's steps.
    assert "where the ranks' step time went" in printed and "sync x2: compute" in printed
    shares = {phase: stats["median"] for phase, stats in sync["time_shares"].items()}
    assert shares["compute"] + shares["data"] + shares["collective"] == pytest.approx(1, abs=0.02)
    assert 0 <= shares["waiting"] <= shares["collective"]

    rows = list(csv.DictReader((out / "bench.csv").open()))
    assert [row["strategy"] for row in rows] == ["single", "sync"]
    assert {"samples_per_s", "speedup", "efficiency", "efficiency_min", "efficiency_max",
            "efficiency_unsteady", "start_method", "unit", "peak_pss_bytes"} <= set(rows[0])
    assert rows[1]["start_method"] == "fork" and rows[1]["unit"] == "epoch"
    assert float(rows[1]["waiting_share"]) == pytest.approx(shares["waiting"])
    assert (out / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_fedavg_cells_run_rounds_against_their_own_reference(tmp_path, capsys):
    out = tmp_path / "bench"
    # One thread per worker: `single x1` would then be the 1-thread reference again and is
    # not run (test_bench_maths covers the matrix with it), so three runs give a table of
    # an epoch cell beside round cells.
    code = bench(["--data", "digits", "--strategies", "single,fedavg", "--workers", "2",
                  "--threads-per-worker", "1", "--epochs", "2", "--repeats", "1",
                  "--clients", "20", "--clients-per-round", "4", "--local-epochs", "1",
                  "--no-memory", "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "s/unit" in printed and "/round" in printed and "/epoch" in printed

    report = json.loads((out / "bench.json").read_text())
    cells = {cell["label"]: cell for cell in report["cells"]}
    assert list(cells) == ["single (1 thread)", "fedavg (1 thread)", "fedavg x2, 1 thr"]
    assert cells["single (1 thread)"]["unit"] == "epoch"
    fedavg = cells["fedavg x2, 1 thr"]
    assert fedavg["unit"] == "round" and fedavg["failed"] == 0
    assert fedavg["efficiency_over"] == "fedavg (1 thread)"
    assert fedavg["efficiency"]["n"] == 1 and fedavg["efficiency"]["median"] > 0
    assert fedavg["test_accuracy"]["median"] is not None
    runs = [run for run in report["runs"] if run["cell"] == "fedavg x2, 1 thr"]
    assert [row["round"] for row in runs[0]["epochs"]] == [1, 2]


@pytest.mark.parametrize("args, message", [
    (["--strategies", "single,bogus"], "unknown bogus"),
    (["--workers", "1,x"], "comma-separated integers"),
    (["--repeats", "0"], "--repeats must be"),
    (["--time-to-accuracy", "97"], "fraction"),
    (["--data", "nope"], "unknown data set"),
    (["--clients", "10"], "--clients applies to fedavg cells only"),
    (["--strategies", "fedavg", "--steps", "3"], "--steps cannot be used with fedavg"),
    pytest.param(["--device", "cuda"], "no CUDA device is visible; use --device cpu",
                 marks=pytest.mark.skipif(torch.cuda.device_count() > 0,
                                          reason="a GPU is visible: it would bench")),
])
def test_bad_bench_input_is_one_line(args, message, capsys):
    assert bench(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mptrain: error:") and message in err and "\n" not in err


class Captured(Exception):
    pass


def test_device_and_precision_reach_every_run(monkeypatch):
    def capture(settings, console):
        raise Captured(settings.run_options)
    monkeypatch.setattr(session, "run_bench", capture)
    with pytest.raises(Captured) as caught:
        bench(["--device", "cpu", "--precision", "bf16", "--lr", "0.1"])
    assert caught.value.args[0] == ("--lr", "0.1", "--device", "cpu", "--precision", "bf16")


def test_without_a_terminal_every_finished_run_prints_a_line(monkeypatch):
    # A log got nothing until the end (86 s and 160 s of silence).
    import io

    from rich.console import Console

    from mptrain.bench import session
    from mptrain.bench.execute import RunRecord

    def fake_run(cell, repeat, workload, sample_memory=False):
        return RunRecord(cell=cell, repeat=repeat, ok=cell.strategy != "sync",
                         error="worker rank 1 died\ntraceback", wall_s=2.5,
                         samples_per_s=1234.0, memory_sampled=sample_memory,
                         peak_pss_bytes=300 * 2**20 if sample_memory else None)

    monkeypatch.setattr(session, "run_cell", fake_run)
    log = io.StringIO()
    settings = session.BenchSettings(
        data="linreg", data_dir=None, model=None, strategies=("single", "sync"),
        workers=(2,), epochs=1, steps=None, repeats=2, threads=None, target_accuracy=None,
        run_options=(), memory=True)
    session.run_bench(settings, Console(file=log, width=200))
    lines = log.getvalue().splitlines()
    total = len(lines)                               # every run of the schedule, in order
    assert total >= 6 and [line.split()[0] for line in lines] == \
        [f"{i}/{total}" for i in range(1, total + 1)]
    assert "repeat 1/2: 2.5 s, 1,234 samples/s" in lines[0]
    assert any("sync" in line and "failed: worker rank 1 died" in line for line in lines)
    assert any("memory: peak memory 300 MiB" in line for line in lines)


@pytest.mark.parametrize("args, message", [
    (["--timeout", "-1"], "Invalid value for '--timeout'"),
    (["--timeout", "0"], "Invalid value for '--timeout'"),
    (["--strategies", ""], "Invalid value for '--strategies': it is empty"),
    (["--strategies", " , "], "--strategies names no strategy"),
    (["--workers", ","], "--workers names no worker count"),
    (["--threads-per-worker", "0"], "Invalid value for '--threads-per-worker'"),
    (["--batch-size", "0"], "Invalid value for '--batch-size'"),
    (["--lr", "-1"], "Invalid value for '--lr'"),
    (["--strategies", "fedavg", "--partition", "dirichlett:0.5"], "--partition"),
    (["--strategies", "fedavg", "--clients", "10", "--clients-per-round", "20"],
     "--clients-per-round 20 is more than --clients 10"),
])
def test_bench_numbers_and_lists_that_cannot_run_are_refused_up_front(args, message, capsys,
                                                                       monkeypatch):
    # Each ran the whole matrix: --timeout -1 and an empty --strategies printed a table
    # and exit 0; the others failed every cell one by one.
    monkeypatch.setattr(session, "run_bench", lambda *a: pytest.fail("the bench ran"))
    assert bench(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mptrain: error:") and message in err and "\n" not in err


def test_a_warm_up_run_refused_stops_the_bench_in_one_line(monkeypatch, capsys):
    # The warm-up runs with every cell's run options: had it been refused (a misspelled
    # --model), each cell would have been refused the same way, one after the other.
    from mptrain.bench.execute import RunRecord

    ran = []

    def refused(cell, repeat, workload, sample_memory=False):
        ran.append(cell)
        return RunRecord(cell=cell, repeat=repeat, ok=False, wall_s=1.0,
                         error="mptrain: error: unknown model 'nonexist'; choose one of: mlp")

    monkeypatch.setattr(session, "run_cell", refused)
    assert bench(["--data", "linreg", "--model", "nonexist", "--strategies", "single,sync",
                  "--workers", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("mptrain: error: the warm-up run (single, 1 thread) failed, and every "
                   "cell would: unknown model 'nonexist'; choose one of: mlp")
    assert len(ran) == 1


def test_time_to_accuracy_that_no_run_can_measure_is_refused_before_any_run(
        tmp_path, monkeypatch, capsys):
    # Regression runs are scored by their test mse, and data without a test set by nothing:
    # every cell printed no time to accuracy and the bench said nothing of why.
    (tmp_path / "train_only.py").write_text(
        "import torch\nfrom torch.utils.data import TensorDataset\n\n\n"
        "def make():\n    return TensorDataset(torch.randn(64, 4), "
        "torch.randint(0, 2, (64,))), None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(session, "run_cell", lambda *a, **k: pytest.fail("a run started"))
    for data, why in (("linreg", "regression"), ("train_only:make", "no test set")):
        assert bench(["--data", data, "--strategies", "single", "--time-to-accuracy",
                      "0.5"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("mptrain: error: --time-to-accuracy") and why in err
        assert "\n" not in err
