"""``fit(resume=...)`` from Python: a run cut after 2 epochs and resumed to 4 ends bitwise
equal to an uninterrupted 4-epoch run, and the resumed run takes the checkpoint's settings
for what is not given again (``fit`` keywords override them)."""

import pytest
import torch
import torch.nn as nn
from torch.utils.data import TensorDataset

import mptrain
from mptrain import checkpoint as checkpoints
from mptrain.errors import UserError

# Adam, a cosine schedule with decay and dropout: optimizer moments, the learning rate at
# each step and the RNG state must all come back exactly for the resumed run to be bitwise.
RECIPE = dict(batch_size=16, lr=0.05, optimizer="adam", lr_schedule="cosine", lr_decay=0.7,
              seed=3, threads_per_worker=1)


def make_data():
    generator = torch.Generator().manual_seed(1)
    inputs = torch.randn(128, 6, generator=generator)
    targets = (inputs @ torch.randn(6, 3, generator=generator)).argmax(dim=1)
    return TensorDataset(inputs, targets), TensorDataset(inputs[:32], targets[:32])


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Dropout(0.2), nn.Linear(8, 3))


def assert_states_equal(a, b):
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def setup_for(strategy):
    return dict(strategy=strategy, workers=1 if strategy == "single" else 2, **RECIPE)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("strategy", ["single", "sync", "ddp"])
def test_a_resumed_fit_ends_bitwise_equal_to_an_uninterrupted_one(tmp_path, strategy):
    train, test = make_data()
    out = tmp_path / "run"
    first = mptrain.fit(make_model(), train, test, out=out, checkpoint_every=1, epochs=2,
                        **setup_for(strategy))
    assert len(first.epochs) == 2 and checkpoints.load(out).epoch == 2

    # A model in another state: the checkpoint's parameters must replace it.
    other = make_model()
    with torch.no_grad():
        for param in other.parameters():
            param.add_(1.0)
    resumed = mptrain.fit(other, train, test, resume=out, out=out, epochs=4)
    straight = mptrain.fit(make_model(), train, test, epochs=4, **setup_for(strategy))

    assert resumed.model is other
    assert_states_equal(resumed.model.state_dict(), straight.model.state_dict())
    assert [e.train_loss for e in resumed.epochs] == [e.train_loss for e in straight.epochs]
    assert [e.test_loss for e in resumed.epochs] == [e.test_loss for e in straight.epochs]
    assert [e.epoch for e in resumed.epochs] == [1, 2, 3, 4]
    assert checkpoints.load(out).epoch == 4


@pytest.mark.timeout(180)
def test_a_resumed_fit_takes_the_checkpoints_settings_and_keywords_override_them(tmp_path):
    train, test = make_data()
    out = tmp_path / "run"
    mptrain.fit(make_model(), train, test, out=out, checkpoint_every=1, epochs=1,
                strategy="sync", workers=2, sync_every=2, momentum=0.5, batch_size=8,
                lr=0.03, optimizer="sgd", lr_schedule="cosine", seed=5, threads_per_worker=1)

    # Nothing but the epochs given again: strategy, workers, lr, ... are the checkpoint's.
    resumed = mptrain.fit(make_model(), train, test, resume=out, out=out, epochs=2)
    config = resumed.config
    assert (config.strategy, config.workers, config.sync_every, config.momentum,
            config.batch_size, config.lr, config.optimizer, config.lr_schedule, config.seed,
            config.checkpoint_every) == ("sync", 2, 2, 0.5, 8, 0.03, "sgd", "cosine", 5, 1)
    assert config.epochs == 2 and len(resumed.epochs) == 2

    # A keyword given again wins over the checkpoint.
    again = mptrain.fit(make_model(), train, test, resume=out, out=out, epochs=3, lr=0.01)
    assert (again.config.lr, again.config.strategy, again.config.sync_every) == \
        (0.01, "sync", 2)


@pytest.mark.timeout(60)
def test_a_resumed_fit_refuses_another_strategy_than_the_checkpoints(tmp_path):
    train, test = make_data()
    out = tmp_path / "run"
    mptrain.fit(make_model(), train, test, out=out, checkpoint_every=1, epochs=1,
                **setup_for("single"))
    # Named as the call names it: strategy, not --strategy.
    with pytest.raises(UserError, match="written by strategy single, not sync: .* resume "
                                        "with strategy single .*no resume"):
        mptrain.fit(make_model(), train, test, resume=out, out=out, epochs=2, strategy="sync",
                    workers=2)


@pytest.mark.timeout(120)
def test_a_resumed_fit_needs_no_out_of_its_own(tmp_path):
    # It continues in the folder it resumed from, as `mptrain run --resume DIR` does.
    train, test = make_data()
    out = tmp_path / "run"
    mptrain.fit(make_model(), train, test, out=out, checkpoint_every=1, epochs=1,
                **setup_for("single"))
    resumed = mptrain.fit(make_model(), train, test, resume=out, epochs=2)
    assert len(resumed.epochs) == 2
    assert sum(1 for _ in (out / "metrics.jsonl").open()) == 2
