"""The built-in networks: the FL literature's two MNIST models as published."""

import pytest
import torch

from mptrain.errors import UserError
from mptrain.models import BUILTIN_MODELS, build_model


@pytest.mark.parametrize("name, parameters", [
    ("mnist-2nn", 199_210),          # 784*200+200 + 200*200+200 + 200*10+10
    ("mnist-cnn-fedavg", 1_663_370),  # McMahan et al. 2017, Table/Section 3
])
def test_fedavg_papers_models_have_their_published_size(name, parameters):
    model = build_model(name, (1, 28, 28), 10)
    assert sum(p.numel() for p in model.parameters()) == parameters
    assert model(torch.zeros(3, 1, 28, 28)).shape == (3, 10)


def test_the_2nn_takes_any_input_size():
    model = build_model("mnist-2nn", (1, 8, 8), 10)
    assert model(torch.zeros(2, 1, 8, 8)).shape == (2, 10)


def test_the_fedavg_cnn_refuses_other_shapes():
    with pytest.raises(UserError, match="expects inputs of shape"):
        build_model("mnist-cnn-fedavg", (1, 8, 8), 10)


def test_initialisation_follows_the_seed():
    a, b = (build_model("mnist-2nn", (1, 28, 28), 10, seed=s) for s in (1, 1))
    c = build_model("mnist-2nn", (1, 28, 28), 10, seed=2)
    assert torch.equal(a.net[1].weight, b.net[1].weight)
    assert not torch.equal(a.net[1].weight, c.net[1].weight)


@pytest.mark.parametrize("name", BUILTIN_MODELS)
def test_every_builtin_is_named_in_the_unknown_model_message(name):
    with pytest.raises(UserError) as caught:
        build_model("bogus", (1, 28, 28), 10)
    assert name in str(caught.value)
