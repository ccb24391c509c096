"""MNIST's pixels held as uint8 in shared memory and decoded in the workers (issue 56,
``--data-dtype``): the workers train the model the float32 set trains, augmented or not."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import mptrain
from mptrain.data.sources import load_data
from mptrain.models import build_model

sys.path.insert(0, str(Path(__file__).parents[1] / "data"))
from test_sources import write_tiny_mnist  # noqa: E402


@pytest.mark.timeout(180)
def test_sync_workers_train_the_same_model_on_uint8_pixels_as_on_float32(tmp_path):
    write_tiny_mnist(tmp_path, n_train=64, n_test=16)

    def run(data_dtype):
        return mptrain.fit(build_model("mnist-2nn", (1, 28, 28), 10, 0),
                           load_data("mnist", str(tmp_path)), strategy="sync", workers=2,
                           epochs=1, batch_size=8, augment="shift:2,hflip",
                           data_dtype=data_dtype)

    held, floats = run("auto"), run("float32")
    assert held.summary["augment"] == "shift:2,hflip"
    assert all(torch.equal(a, b) for a, b in zip(held.model.state_dict().values(),
                                                  floats.model.state_dict().values()))
