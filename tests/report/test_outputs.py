"""What mptrain writes as JSON is strict JSON: no NaN or Infinity, null where a value is
not a finite number."""

import json
import math

import numpy as np
import pytest
import torch

from mptrain.report.outputs import json_text, write_json, write_jsonl

NOT_FINITE = [float("nan"), float("inf"), -math.inf, np.float32("nan"), np.float64("inf"),
              torch.tensor(float("nan")), np.array(float("-inf"))]


def strict(text):
    def refuse(constant):
        raise AssertionError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("value", NOT_FINITE, ids=repr)
def test_a_value_that_is_not_a_finite_number_is_null(value):
    assert strict(json_text({"loss": value, "rows": [1.5, value], "pair": (value, 2)})) == \
        {"loss": None, "rows": [1.5, None], "pair": [None, 2]}


def test_summary_and_metrics_files_are_strict_json(tmp_path):
    write_json(tmp_path / "summary.json", {"final_train_loss": float("nan"),
                                           "test_accuracy": np.float32(0.5),
                                           "speedup": {"median": float("inf")}})
    write_jsonl(tmp_path / "metrics.jsonl", [{"epoch": 1, "train_loss": float("nan")},
                                             {"epoch": 2, "train_loss": 0.25}])
    assert strict((tmp_path / "summary.json").read_text()) == \
        {"final_train_loss": None, "test_accuracy": 0.5, "speedup": {"median": None}}
    rows = [strict(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows == [{"epoch": 1, "train_loss": None}, {"epoch": 2, "train_loss": 0.25}]


# -- another run's outputs in --out (issue 57: a 1-epoch run replaced a 5-epoch run's) ------

from mptrain.errors import UserError, as_keyword, spelled   # noqa: E402
from mptrain.report.outputs import refuse_other_runs_outputs   # noqa: E402


def test_a_folder_without_outputs_is_free(tmp_path):
    refuse_other_runs_outputs(tmp_path)                       # empty
    (tmp_path / ".mptrain.lock").write_text("1\n")            # a killed run's lock file
    (tmp_path / "notes.txt").write_text("mine")               # the user's own file
    refuse_other_runs_outputs(tmp_path)


def test_a_finished_run_is_named_with_its_files_and_the_flags(tmp_path):
    write_json(tmp_path / "summary.json", {"rounds_done": 5, "unit": "epoch"})
    (tmp_path / "checkpoint.pt").write_bytes(b"")
    with pytest.raises(UserError) as caught:
        refuse_other_runs_outputs(tmp_path)
    assert str(caught.value) == (f"{tmp_path} holds a finished 5-epoch run (summary.json, "
                                 f"checkpoint.pt); --resume {tmp_path} to continue it, "
                                 "--overwrite to replace it, or another --out")


def test_a_stopped_run_without_checkpoint_cannot_be_continued(tmp_path):
    write_jsonl(tmp_path / "metrics.jsonl", [{"epoch": 1}, {"epoch": 2}, {"epoch": 3}])
    with pytest.raises(UserError) as caught:
        refuse_other_runs_outputs(tmp_path)
    assert str(caught.value) == (f"{tmp_path} holds an unfinished run of 3 rounds "
                                 "(metrics.jsonl); --overwrite to replace it, or another "
                                 "--out")


def test_fit_is_told_its_keywords(tmp_path):
    (tmp_path / "model.pt").write_bytes(b"")
    (tmp_path / "checkpoint.pt").write_bytes(b"")
    with spelled(as_keyword), pytest.raises(UserError) as caught:
        refuse_other_runs_outputs(tmp_path)
    assert str(caught.value).endswith(f"(model.pt, checkpoint.pt); resume={str(tmp_path)!r} "
                                      "to continue it, overwrite=True to replace it, or "
                                      "another out")


def test_a_trackers_folder_alone_is_no_run(tmp_path):
    # Made as a run starts: a run stopped before its first round (or a torchrun job
    # restarted before its first checkpoint) left nothing to keep.
    (tmp_path / "tb").mkdir()
    refuse_other_runs_outputs(tmp_path)
