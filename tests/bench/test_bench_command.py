"""`mptrain bench` end to end on a tiny workload: files, schema, failures as values."""

import csv
import json

import pytest

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
    code = bench(["--data", "digits", "--strategies", "single,sync", "--workers", "2",
                  "--epochs", "1", "--steps", "3", "--repeats", "2",
                  "--time-to-accuracy", "0.05", "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "sync x2" in printed and "single (1 thread)" in printed

    report = json.loads((out / "bench.json").read_text())
    assert {"usable_cores", "torch", "start_method"} <= set(report["machine"])
    labels = [cell["label"] for cell in report["cells"]]
    assert labels == ["single (1 thread)", "single x1", "sync x2"]
    assert len(report["runs"]) == 3 * len(labels)  # 2 timed, 1 sampled for memory
    assert sum(run["memory_sampled"] for run in report["runs"]) == len(labels)
    sync = report["cells"][2]
    assert sync["samples_per_s"]["n"] == 2 and sync["efficiency"] > 0
    assert sync["peak_pss_bytes"]["median"] > 0
    assert sync["time_to_accuracy_s"]["n"] == 2

    rows = list(csv.DictReader((out / "bench.csv").open()))
    assert [row["strategy"] for row in rows] == ["single", "single", "sync"]
    assert {"samples_per_s", "speedup", "efficiency", "peak_pss_bytes"} <= set(rows[0])
    assert (out / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("args, message", [
    (["--strategies", "single,bogus"], "unknown bogus"),
    (["--workers", "1,x"], "comma-separated integers"),
    (["--repeats", "0"], "--repeats must be"),
    (["--time-to-accuracy", "97"], "fraction"),
    (["--data", "nope"], "unknown data set"),
])
def test_bad_bench_input_is_one_line(args, message, capsys):
    assert bench(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mptrain: error:") and message in err and "\n" not in err
