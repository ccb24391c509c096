"""The small workload the tracker tests train, and what they compare against."""

import math

import torch
import torch.nn as nn
from torch.utils.data import TensorDataset

from tracker_readers import metric_rows

ISOLATED = ("WANDB_MODE", "WANDB_API_KEY", "WANDB_DIR", "WANDB_PROJECT", "MLFLOW_TRACKING_URI",
            "MLFLOW_EXPERIMENT_NAME")
EPOCHS = 3
RECIPE = dict(batch_size=16, lr=0.05, seed=3, threads_per_worker=1, quiet=True)


def make_data():
    generator = torch.Generator().manual_seed(1)
    inputs = torch.randn(128, 6, generator=generator)
    targets = (inputs @ torch.randn(6, 3, generator=generator)).argmax(dim=1)
    return TensorDataset(inputs, targets), TensorDataset(inputs[:32], targets[:32])


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))


def isolate(patch, folder):
    """W&B offline with its folders in ``folder``, no MLflow server."""
    for name in ISOLATED:
        patch.delenv(name, raising=False)
    for name in ("WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_CONFIG_DIR", "WANDB_ARTIFACT_DIR"):
        patch.setenv(name, str(folder / name.lower()))


class StopAtRound:
    """A callback of the user's that fails the run when ``round`` ends."""

    def __init__(self, round_):
        self.round = round_

    def on_round_end(self, row):
        if row["epoch"] == self.round:
            raise RuntimeError(f"stopped at round {self.round}")


def scalar_rows(out):
    """metrics.jsonl's numbers per round, as the trackers get them."""
    return {row["epoch"]: {k: v for k, v in row.items()
                           if isinstance(v, (int, float)) and not isinstance(v, bool)
                           and math.isfinite(v) and k != "epoch"}
            for row in metric_rows(out)}
