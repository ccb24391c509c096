"""The run's cohort trainer, made from its settings: one place that the FedAvg cohorts and
the personal ones (Ditto's models, FedRep's heads) both build theirs from."""

from __future__ import annotations

import torch

from ...federated.cohorts.optimizer import ClientOptimizerSettings
from ...federated.cohorts.trainer import CohortTrainer


def cohort_trainer(config, model, task: str, device, prox_mu: float | None = None
                   ) -> CohortTrainer:
    """The run's cohort trainer; ``prox_mu``: a pull other than FedProx's to each client's
    start -- Ditto's, towards the global model from a client's own personal model."""
    return CohortTrainer(model, task, ClientOptimizerSettings(
        config.optimizer, config.lr, config.momentum, config.weight_decay),
        torch.device(device), precision=config.precision,
        prox_mu=config.fedavg.prox_mu if prox_mu is None else prox_mu,
        pull_to_global=prox_mu is not None)
