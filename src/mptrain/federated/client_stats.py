"""Per-client evaluation: the global model's accuracy on each client's own data, summarised
the way fairness and personalization papers report it (the unweighted mean and the 10th
percentile: q-FFL, Ditto; the sample-weighted mean: LEAF, FedProx)."""

from __future__ import annotations

import torch


def summarize(samples: torch.Tensor, correct: torch.Tensor, loss_sum: torch.Tensor) -> dict:
    """Over the clients with samples: the unweighted mean of their accuracies, its standard
    deviation (population), 10th percentile (linear interpolation) and worst; the
    sample-weighted mean (every sample counts once); the weighted mean loss."""
    samples, correct, loss_sum = samples.double(), correct.double(), loss_sum.double()
    some = samples > 0
    values = correct[some] / samples[some]
    if values.numel() == 0:
        return {"client_acc_mean": None, "client_acc_weighted": None, "client_acc_std": None,
                "client_acc_p10": None, "client_acc_worst": None, "client_loss": None,
                "clients_evaluated": 0}
    total = samples[some].sum()
    return {"client_acc_mean": values.mean().item(),
            "client_acc_weighted": (correct[some].sum() / total).item(),
            "client_acc_std": values.std(correction=0).item(),
            "client_acc_p10": torch.quantile(values, 0.1).item(),
            "client_acc_worst": values.min().item(),
            "client_loss": (loss_sum[some].sum() / total).item(),
            "clients_evaluated": values.numel()}
