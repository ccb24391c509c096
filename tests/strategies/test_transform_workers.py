"""Per-batch transforms in worker processes (issue 56): ddp's two ranks and fedavg's clients
draw their own augmentation, reproducibly; a checkpoint never chooses the transform."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import mptrain
from mptrain.data.sources import digits
from mptrain.errors import UserError


def tiny_cnn():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 36, 10))


def flip_signs(inputs, targets, generator):
    signs = torch.randint(0, 2, (len(inputs), 1, 1, 1), generator=generator) * 2 - 1
    return inputs * signs, targets


def same(a, b) -> bool:
    a, b = a.state_dict(), b.state_dict()
    return all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.timeout(180)
def test_ddp_ranks_augment_reproducibly():
    def run(**options):
        return mptrain.fit(tiny_cnn(), digits(), strategy="ddp", workers=2, epochs=1,
                           steps_per_epoch=3, batch_size=16, **options).model

    once, again = run(augment="shift:1,hflip"), run(augment="shift:1,hflip")
    assert same(once, again)
    assert not same(once, run())


@pytest.mark.timeout(180)
def test_fedavg_clients_transform_one_at_a_time_reproducibly():
    def run():
        return mptrain.fit(tiny_cnn(), digits(), strategy="fedavg", workers=1, rounds=2,
                           clients=4, clients_per_round=2, batch_size=16,
                           transform=flip_signs)

    assert same(run().model, run().model)


def test_vectorized_clients_are_refused_with_a_transform():
    with pytest.raises(UserError, match="vectorize_clients on: augment transforms one "
                                        "client's batches at a time"):
        mptrain.fit(tiny_cnn(), digits(), strategy="fedavg", rounds=1, clients=4,
                    clients_per_round=2, augment="hflip", vectorize_clients="on")


@pytest.mark.timeout(120)
def test_a_resume_must_name_the_transform_again(tmp_path):
    mptrain.fit(tiny_cnn(), digits(), strategy="single", epochs=1, steps_per_epoch=2,
                transform=flip_signs, out=tmp_path, checkpoint_every=1)
    with pytest.raises(UserError, match="the checkpoint names your code transform"):
        mptrain.fit(tiny_cnn(), digits(), strategy="single", epochs=2, steps_per_epoch=2,
                    resume=tmp_path, out=tmp_path)
    resumed = mptrain.fit(tiny_cnn(), digits(), strategy="single", epochs=2,
                          steps_per_epoch=2, transform=flip_signs, resume=tmp_path,
                          out=tmp_path)
    assert resumed.config.transform.endswith(":flip_signs")
