"""A checkpoint written before a setting was refused where it does nothing resumes as it
trained: its user cannot unsay what the checkpoint says (``--target-accuracy`` has no value
meaning "none"), so the refusals read what the resumed run's user said, and what the
stored run could not use is left behind (``config.applicable_settings``,
``preflight.inherited``). Such checkpoints are made here by writing the setting into a
new checkpoint's config, as the older code stored it."""

import pytest
import torch
import torch.nn as nn
from torch.utils.data import TensorDataset

import mptrain
from mptrain import checkpoint as checkpoints
from mptrain.errors import UserError

pytestmark = pytest.mark.timeout(180)


def regression():
    generator = torch.Generator().manual_seed(1)
    inputs = torch.randn(64, 4, generator=generator)
    return TensorDataset(inputs, inputs.sum(1, keepdim=True)), \
        TensorDataset(inputs[:16], inputs[:16].sum(1, keepdim=True))


def classes():
    generator = torch.Generator().manual_seed(2)
    inputs = torch.randn(64, 4, generator=generator)
    return TensorDataset(inputs, (inputs[:, 0] > 0).long()), \
        TensorDataset(inputs[:16], (inputs[:16, 0] > 0).long())


def stored_as_before(out, **settings):
    """The checkpoint in ``out`` with ``settings`` in its config, as older code wrote it."""
    path = out / checkpoints.FILENAME
    saved = torch.load(path, weights_only=True)
    saved["config"].update(settings)
    torch.save(saved, path)


def test_a_regression_run_that_stored_a_target_accuracy_resumes(tmp_path):
    train, test = regression()
    out = tmp_path / "run"
    mptrain.fit(nn.Linear(4, 1), train, test, out=out, epochs=1, checkpoint_every=1)
    stored_as_before(out, target_accuracy=0.5)
    resumed = mptrain.fit(nn.Linear(4, 1), train, test, resume=out, out=out, epochs=2)
    assert len(resumed.epochs) == 2
    with pytest.raises(UserError, match="regression run"):   # said anew: refused
        mptrain.fit(nn.Linear(4, 1), train, test, resume=out, out=out, epochs=3,
                    target_accuracy=0.6)


@pytest.mark.parametrize("strategy", ["fedavg", "fedbuff"])
def test_a_regression_fedavg_run_that_stored_client_evaluation_resumes(tmp_path, strategy):
    train, test = regression()
    out = tmp_path / "run"
    sampled = dict(clients_per_round=2) if strategy == "fedavg" else dict(concurrency=2)
    mptrain.fit(nn.Linear(4, 1), train, test, strategy=strategy, workers=1, rounds=1,
                clients=4, out=out, checkpoint_every=1, **sampled)
    stored_as_before(out, client_eval_every=1)
    resumed = mptrain.fit(nn.Linear(4, 1), train, test, resume=out, out=out, rounds=2)
    assert len(resumed.epochs) == 2
    assert not (out / "client_metrics.jsonl").exists()   # it scored nothing, as before


@pytest.mark.parametrize("stored, strategy", [
    (dict(loader="stacked", loader_workers=4), "sync"),
    (dict(share_optimizer_state=True, momentum=0.0, optimizer="sgd"), "hogwild"),
])
def test_settings_that_did_nothing_are_left_behind_by_a_resume(tmp_path, stored, strategy):
    train, test = classes()
    out = tmp_path / "run"
    options = {k: v for k, v in stored.items() if k not in ("loader_workers",
                                                              "share_optimizer_state")}
    mptrain.fit(nn.Linear(4, 2), train, test, strategy=strategy, workers=2, epochs=1,
                batch_size=16, out=out, checkpoint_every=1, **options)
    stored_as_before(out, **stored)
    resumed = mptrain.fit(nn.Linear(4, 2), train, test, resume=out, out=out, epochs=2)
    assert len(resumed.epochs) == 2
