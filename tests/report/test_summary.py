"""summary.json and the closing lines of a supervised run, from its rows (no processes)."""

from types import SimpleNamespace

import torch
import torch.nn as nn
from torch.utils.data import TensorDataset

from mptrain.api import bundle_from_datasets
from mptrain.config import TrainConfig
from mptrain.report.metrics import RoundMetrics
from mptrain.report.summary import build_summary, result_lines

PLAN = SimpleNamespace(workers=2, processes=None, threads=1, start_method="fork", cores=2)


def row(epoch, accuracy, seconds=2.0, samples=100, loss=0.5):
    return RoundMetrics(epoch=epoch, train_loss=loss, test_loss=0.4, test_accuracy=accuracy,
                        test_mse=None, samples_per_s=samples / seconds, epoch_s=seconds,
                        train_samples=samples, steps=4, minor_faults=0)


def classification():
    inputs, targets = torch.randn(20, 4), torch.randint(0, 3, (20,))
    return bundle_from_datasets(TensorDataset(inputs, targets),
                                TensorDataset(inputs[:8], targets[:8]))


def test_a_classification_summary_reports_the_last_epoch_and_the_target():
    config = TrainConfig(strategy="sync", workers=2, epochs=3, target_accuracy=0.8)
    rows = [row(1, 0.5), row(2, 0.85), row(3, 0.9, seconds=6.0)]
    summary = build_summary(config, classification(), nn.Linear(4, 3), "mine", PLAN, rows,
                            wall_s=12.0, startup_s=1.5)
    assert (summary["strategy"], summary["workers"], summary["processes"]) == ("sync", 2, 2)
    assert summary["device"] == "cpu"
    assert (summary["unit"], summary["epochs"], summary["rounds_done"]) == ("epoch", 3, 3)
    assert summary["test_accuracy"] == 0.9 and summary["final_train_loss"] == 0.5
    assert summary["train_samples_per_s"] == 300 / 10.0      # all samples over train time
    assert summary["target_reached_at_epoch"] == 2
    assert (summary["train_samples"], summary["test_samples"]) == (20, 8)
    lines = result_lines({**summary, "train_samples_per_s": 30.0}, None)
    assert lines[0] == "[bold]done[/bold]: test accuracy 90.00% · 12.0 s wall · 30 train " \
                       "samples/s"
    assert lines[1] == "target accuracy 80.00% reached at epoch 2"


def test_a_run_with_no_epoch_done_says_so():
    summary = build_summary(TrainConfig(), classification(), nn.Linear(4, 3), "mine", PLAN,
                            [], wall_s=1.0, startup_s=None)
    assert summary["test_accuracy"] is None and summary["train_samples_per_s"] is None
    assert summary["process_start_to_first_step_s"] is None
    assert result_lines(summary, None)[0].startswith("[bold]done[/bold]: no epoch completed")


def test_a_one_input_linear_model_reports_its_weight_and_bias():
    bundle = bundle_from_datasets(TensorDataset(torch.randn(10, 1), torch.randn(10, 1)), None)
    model = nn.Linear(1, 1)
    with torch.no_grad():
        model.weight.fill_(2.0)
        model.bias.fill_(-1.0)
    mse = RoundMetrics(epoch=1, train_loss=0.1, test_loss=None, test_accuracy=None,
                       test_mse=None, samples_per_s=5.0, epoch_s=2.0, train_samples=10,
                       steps=1, minor_faults=0)
    summary = build_summary(TrainConfig(), bundle, model, "linreg", PLAN, [mse], 3.0, 1.0)
    assert (summary["weight"], summary["bias"]) == (2.0, -1.0)
    assert "test_accuracy" not in summary and summary["test_mse"] is None
