"""CSV: metrics.csv holds exactly metrics.jsonl's rows, whatever the run went through."""

import csv
import json

import pytest

from tracker_readers import metric_rows


def read_csv(out):
    with open(out / "metrics.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def assert_mirrors_jsonl(out):
    rows, jsonl = read_csv(out), metric_rows(out)
    assert len(rows) == len(jsonl)
    for row, line in zip(rows, jsonl):
        assert set(row) == set(line) or set(line) <= set(row)
        for key, value in line.items():
            if value is None:
                assert row[key] == ""
            elif isinstance(value, (list, dict)):
                assert json.loads(row[key]) == value
            elif isinstance(value, float):
                assert float(row[key]) == pytest.approx(value, rel=1e-12)
            else:
                assert row[key] == str(value)


@pytest.mark.parametrize("run", ["supervised_run", "fedavg_run", "rl_run", "resumed_run"])
def test_csv_mirrors_metrics_jsonl(request, run):
    out = request.getfixturevalue(run)[0]
    assert_mirrors_jsonl(out)
    if run == "resumed_run":
        assert [int(row["epoch"]) for row in read_csv(out)] == [1, 2, 3, 4]
    if run == "fedavg_run":
        assert read_csv(out)[0]["failed_clients"] == "[]"


def test_the_header_grows_with_new_columns(tmp_path):
    from mptrain.trackers.to_csv import write_csv

    write_csv(tmp_path / "m.csv", [{"epoch": 1, "a": 1.5}, {"epoch": 2, "a": 2, "b": None},
                                   {"epoch": 3, "c": [1]}])
    assert (tmp_path / "m.csv").read_text().splitlines() == \
        ["epoch,a,b,c", "1,1.5,,", "2,2,,", "3,,,[1]"]
