"""What the stacked path says about itself names the settings as the caller wrote them:
``--vectorize-clients off`` on the command line, ``vectorize_clients off`` from ``fit()`` --
in its refusals and in the reason ``summary.json`` gives for training one at a time."""

import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import mptrain
from mptrain.errors import UserError

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from fedavg_workload import RUN, make_data, make_model, make_test_data  # noqa: E402
from user_errors import fail  # noqa: E402

NORM_MODELS = '''
import torch.nn as nn


def linear_norm():
    return nn.Sequential(nn.Linear(1, 8), nn.BatchNorm1d(8), nn.Linear(8, 1))
'''


def norm_model():
    torch.manual_seed(7)
    return nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.Tanh(), nn.Linear(16, 3))


def fit(model, **options):
    return mptrain.fit(model, make_data(), make_test_data(),
                       **{**RUN, "workers": 1, "rounds": 1, **options})


@pytest.mark.timeout(120)
def test_refusing_a_model_from_fit_names_keywords():
    with pytest.raises(UserError) as caught:
        fit(norm_model(), vectorize_clients="on")
    said = str(caught.value)
    assert said.startswith("vectorize_clients on: module '1' (BatchNorm1d)"), said
    assert said.endswith("or vectorize_clients off") and "--" not in said, said


@pytest.mark.timeout(120)
def test_refusing_a_model_on_the_command_line_names_flags(tmp_path, monkeypatch, capsys):
    (tmp_path / "norm_models.py").write_text(NORM_MODELS)
    monkeypatch.syspath_prepend(str(tmp_path))
    shown = fail(["run", "--strategy", "fedavg", "--data", "linreg", "--model",
                  "norm_models:linear_norm", "--workers", "1", "--rounds", "1",
                  "--clients", "8", "--clients-per-round", "4", "--vectorize-clients", "on",
                  "--quiet", "--out", str(tmp_path / "out")], capsys)
    assert shown.startswith("mptrain: error: --vectorize-clients on: module '1' "
                            "(BatchNorm1d)"), shown
    assert shown.rstrip().endswith("or --vectorize-clients off"), shown


@pytest.mark.timeout(120)
@pytest.mark.parametrize("options, reason", [
    (dict(vectorize_clients="off"), "one client at a time: vectorize_clients off"),
    (dict(), "one client at a time: 4 client(s) per worker per round (auto stacks 10 or "
             "more on a CPU; vectorize_clients on to try)"),
])
def test_the_reason_in_a_fit_summary_names_keywords(options, reason):
    assert fit(make_model(), **options).summary["client_path"] == reason
