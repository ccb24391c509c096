"""Per-batch transforms in worker processes (issue 56): ddp's two ranks and fedavg's clients
draw their own augmentation, reproducibly; a checkpoint never chooses the transform."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import mptrain
from mptrain.data.sources import digits
from mptrain.errors import UserError, WorkerFailedError


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
        # One thread: a forked worker (with two, the fork server's, seconds a run that
        # prove nothing here; test_spawned_workers_import_the_transform_by_its_name
        # covers workers that import the transform afresh).
        return mptrain.fit(tiny_cnn(), digits(), strategy="fedavg", workers=1, rounds=1,
                           threads_per_worker=1, clients=8, clients_per_round=2,
                           local_epochs=1, batch_size=32, transform=flip_signs)

    assert same(run().model, run().model)


def test_vectorized_clients_are_refused_with_a_transform():
    with pytest.raises(UserError, match="vectorize_clients on: augment works on one "
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


@pytest.mark.timeout(180)
def test_a_transform_that_raises_in_a_worker_fails_the_run_with_its_traceback():
    with pytest.raises(WorkerFailedError) as caught:
        mptrain.fit(tiny_cnn(), digits(), strategy="sync", workers=2, epochs=1,
                    steps_per_epoch=2, batch_size=16, transform=raises_in_workers)
    message = str(caught.value)
    assert "ValueError: the crop went out of the image" in message
    assert "raises_in_workers" in message   # the traceback names the user's function


def raises_in_workers(inputs, targets, generator):
    import multiprocessing

    if multiprocessing.current_process().name != "MainProcess":   # not the parent's check
        raise ValueError("the crop went out of the image")
    return inputs, targets


@pytest.mark.timeout(180)
def test_spawned_workers_import_the_transform_by_its_name():
    # A spawned worker has no table of given functions: it imports the name itself.
    def run(**options):
        return mptrain.fit(tiny_cnn(), digits(), strategy="sync", workers=2, epochs=1,
                           steps_per_epoch=2, batch_size=16,
                           transform=f"{__file__}:flip_signs", **options).model

    assert same(run(start_method="spawn"), run())
