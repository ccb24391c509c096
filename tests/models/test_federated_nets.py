"""The published models by name: their sizes as the papers give them, their outputs, and a
data shape they cannot read refused in one line."""

import pytest
import torch

from mptrain.errors import UserError
from mptrain.models import build_model

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("name, shape, classes, parameters, batch", [
    ("leaf-femnist-cnn", (1, 28, 28), 62, 6_603_710, torch.rand(2, 1, 28, 28)),
    ("leaf-shakespeare-lstm", (80,), 80, 819_920, torch.randint(0, 80, (2, 80),
                                                                dtype=torch.uint8)),
    ("mclr", (60,), 10, 610, torch.randn(2, 60)),
    ("resnet18-gn", (3, 32, 32), 10, 11_173_962, torch.randn(2, 3, 32, 32)),
])
def test_sizes_and_outputs(name, shape, classes, parameters, batch):
    model = build_model(name, shape, classes)
    assert sum(p.numel() for p in model.parameters()) == parameters
    assert model(batch).shape == (2, classes)


def test_resnet18_gn_has_no_batch_norm():
    model = build_model("resnet18-gn", (3, 32, 32), 10)
    kinds = {type(m).__name__ for m in model.modules()}
    assert "GroupNorm" in kinds and not any("BatchNorm" in k for k in kinds)
    assert all(m.num_groups == 2 for m in model.modules() if isinstance(m, torch.nn.GroupNorm))


@pytest.mark.parametrize("name, shape, needle", [
    ("leaf-femnist-cnn", (60,), "expects inputs of shape"),
    ("leaf-shakespeare-lstm", (1, 28, 28), "sequences of character indices"),
    ("resnet18-gn", (1, 28, 28), "32x32 images"),
])
def test_shapes_they_cannot_read(name, shape, needle):
    with pytest.raises(UserError, match=needle):
        build_model(name, shape, 10)
