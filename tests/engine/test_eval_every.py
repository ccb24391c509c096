"""``eval_every``: the test set is evaluated every N epochs and at the end, and evaluating
never changes the training (no RNG drawn, no BatchNorm statistics updated, no epoch boundary
added).
"""

import json

import pytest
import torch
import torch.nn as nn
from torch.utils.data import TensorDataset

import mptrain


def make_data():
    generator = torch.Generator().manual_seed(2)
    inputs = torch.randn(128, 6, generator=generator)
    targets = (inputs @ torch.randn(6, 3, generator=generator)).argmax(dim=1)
    return TensorDataset(inputs, targets), TensorDataset(inputs[:40], targets[:40])


class DropoutNormNet(nn.Module):
    """Dropout draws from the RNG and BatchNorm updates its statistics in training mode: an
    evaluation that drew random numbers or ran in training mode would change the model."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.hidden = nn.Linear(6, 16)
        self.norm = nn.BatchNorm1d(16)
        self.drop = nn.Dropout(0.3)
        self.out = nn.Linear(16, 3)

    def forward(self, x):
        return self.out(self.drop(torch.tanh(self.norm(self.hidden(x)))))


def run(strategy, eval_every, out=None):
    train, test = make_data()
    return mptrain.fit(DropoutNormNet(), train, test, out=out, strategy=strategy,
                       workers=1 if strategy == "single" else 2, epochs=4, batch_size=16,
                       lr=0.05, optimizer="sgd", momentum=0.9, lr_decay=0.8,
                       lr_schedule="cosine", eval_every=eval_every, seed=1,
                       threads_per_worker=1)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("strategy", ["single", "sync", "ddp", "hogwild"])
def test_eval_every_two_evaluates_epochs_two_and_four_only(tmp_path, strategy):
    result = run(strategy, 2, out=tmp_path / "run")

    evaluated = [e.epoch for e in result.epochs if e.test_loss is not None]
    assert [e.epoch for e in result.epochs] == [1, 2, 3, 4]  # every epoch still trains
    assert evaluated == [2, 4]
    for epoch in result.epochs:
        assert (epoch.test_accuracy is None) == (epoch.epoch not in (2, 4))
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text()
            .splitlines()]
    assert [row["test_accuracy"] is not None for row in rows] == [False, True, False, True]
    assert result.test_accuracy == result.epochs[-1].test_accuracy


@pytest.mark.timeout(60)
def test_the_last_epoch_is_always_evaluated():
    result = run("single", 3)
    assert [e.epoch for e in result.epochs if e.test_loss is not None] == [3, 4]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("strategy", ["single", "sync", "ddp"])
def test_evaluating_does_not_change_the_training(strategy):
    sparse, every = run(strategy, 2), run(strategy, 1)

    assert len(every.epochs) == 4 and all(e.test_loss is not None for e in every.epochs)
    assert [e.train_loss for e in sparse.epochs] == [e.train_loss for e in every.epochs]
    a, b = sparse.model.state_dict(), every.model.state_dict()
    assert a.keys() == b.keys()
    for key in a:  # parameters and BatchNorm statistics, bitwise
        assert torch.equal(a[key], b[key]), key
    assert sparse.epochs[-1].test_loss == every.epochs[-1].test_loss
