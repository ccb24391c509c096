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
