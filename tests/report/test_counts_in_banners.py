"""Counts in the banners say "1 round", "2 rounds" (``report.words.count``)."""

from types import SimpleNamespace

import pytest
import torch.nn as nn

from mptrain.config import TrainConfig


@pytest.mark.parametrize("rounds, epochs, every, expected", [
    (1, 1, 1, "1 local epoch of batch 32, 1 round · every client evaluated every round"),
    (3, 2, 2, "2 local epochs of batch 32, 3 rounds · every client evaluated every 2 rounds"),
])
def test_the_fedavg_banner_counts_in_words(monkeypatch, rounds, epochs, every, expected):
    from mptrain.strategies.fedavg import report

    monkeypatch.setattr(report, "uses_shared_table", lambda *args: False)
    config = TrainConfig(strategy="fedavg", clients=12, clients_per_round=10, rounds=rounds,
                         local_epochs=epochs, batch_size=32, client_eval_every=every)
    plan = SimpleNamespace(comm=SimpleNamespace(shares_memory=True))
    text = " · ".join(report.describe(config, plan, nn.Linear(4, 2), None))
    assert expected in text.replace("\n", " · ")
