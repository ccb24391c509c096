"""Per-client evaluation: the global model's accuracy on each client's own data, summarised
the way fairness and personalization papers report it."""

from __future__ import annotations

import torch


def summarize(accuracies: torch.Tensor) -> dict:
    """Mean, standard deviation (population), 10th percentile (linear interpolation) and
    worst of the clients' accuracies; clients without data (NaN) are left out."""
    values = accuracies.double()
    values = values[~torch.isnan(values)]
    if values.numel() == 0:
        return {"client_acc_mean": None, "client_acc_std": None, "client_acc_p10": None,
                "client_acc_worst": None, "clients_evaluated": 0}
    return {"client_acc_mean": values.mean().item(),
            "client_acc_std": values.std(correction=0).item(),
            "client_acc_p10": torch.quantile(values, 0.1).item(),
            "client_acc_worst": values.min().item(),
            "clients_evaluated": values.numel()}
