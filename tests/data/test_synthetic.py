"""FedProx's Synthetic(alpha, beta): the paper's shapes and split, seeded, and the same
data however many devices are drawn together."""

import numpy as np
import pytest
import torch

from mptrain.data.natural import synthetic
from mptrain.data.sources import load_data
from mptrain.errors import UserError

pytestmark = pytest.mark.timeout(60)


def test_the_papers_shape_thirty_devices_ninety_ten_per_device():
    bundle = load_data("synthetic:1,1", seed=0)
    clients = bundle.clients
    assert clients.count == 30 and bundle.output_size == 10 and bundle.default_model == "mclr"
    assert bundle.train.inputs.shape[1] == 60 and bundle.train.inputs.dtype == torch.float32
    train, test = clients.train_sizes(), clients.test_sizes()
    total = train + test
    assert (total >= 50).all()   # lognormal(4, 2) + 50
    assert torch.equal(train, (0.9 * total.double()).long())
    assert len(bundle.train) == int(train.sum()) and len(bundle.test) == int(test.sum())
    assert set(bundle.train.targets.unique().tolist()) <= set(range(10))
    assert bundle.defaults.federated["clients"] == 30


def test_seeded_and_different_per_seed():
    a, b = load_data("synthetic:0.5,0.5", seed=3), load_data("synthetic:0.5,0.5", seed=3)
    assert torch.equal(a.train.inputs, b.train.inputs)
    assert torch.equal(a.test.targets, b.test.targets)
    c = load_data("synthetic:0.5,0.5", seed=4)
    assert not torch.equal(a.clients.train_offsets, c.clients.train_offsets)


def test_iid_devices_share_one_model_and_zero_means():
    bundle = load_data("synthetic-iid", seed=0)
    x = bundle.train.inputs.double()
    # v_k = 0 for every device: the inputs' mean is near 0 in every feature.
    assert x.mean(0).abs().max() < 0.2
    # One W, b for all: the devices' label mixes are alike (a device's own W_k skews its).
    from mptrain.data.heterogeneity import heterogeneity

    iid = heterogeneity(bundle.train.targets.numpy(), np.arange(len(x)),
                        bundle.clients.train_offsets.numpy(), 10)
    own = load_data("synthetic:1,0", seed=0)
    skewed = heterogeneity(own.train.targets.numpy(), np.arange(len(own.train)),
                           own.clients.train_offsets.numpy(), 10)
    assert iid.hellinger.mean() < skewed.hellinger.mean() - 0.2


def test_heterogeneous_devices_differ_in_their_input_means():
    bundle = load_data("synthetic:0,1", seed=0)
    offsets = bundle.clients.train_offsets.tolist()
    means = torch.stack([bundle.train.inputs[offsets[c]:offsets[c + 1]].mean(0)
                         for c in range(30)])
    assert means[:, 0].std() > 0.5   # v_k ~ N(B_k, 1), B_k ~ N(0, 1)


def test_many_devices_are_generated_vectorised():
    bundle = load_data("synthetic:1,1", clients=2000, seed=0)
    assert bundle.clients.count == 2000
    assert int(bundle.clients.train_offsets[-1]) == len(bundle.train)


@pytest.mark.parametrize("name", ["synthetic:1", "synthetic:a,b", "synthetic:-1,0",
                                  "synthetic:1,1,1"])
def test_bad_parameters_are_one_line(name):
    with pytest.raises(UserError, match="synthetic:ALPHA,BETA"):
        load_data(name)


@pytest.mark.parametrize("name", ["synthetic:1e308,1", "synthetic:1,1e308", "synthetic:1e7,0"])
def test_deviations_past_the_range_are_refused_with_the_range(name):
    """1e308 drew infinite inputs and NaN logits (every label 0): training data that
    cannot train, made without a word."""
    with pytest.raises(UserError, match="from 0 to 1e6"):
        load_data(name)


def test_the_largest_deviation_accepted_draws_finite_data():
    bundle = load_data("synthetic:1e6,1e6", clients=2, seed=0)
    assert torch.isfinite(bundle.train.inputs).all()
    assert len(bundle.train.targets.unique()) > 1


def test_synthetic_iid_with_parameters_says_it_takes_none():
    """It was read as an import string: "cannot import module 'synthetic-iid'"."""
    with pytest.raises(UserError, match="synthetic-iid takes no parameters"):
        load_data("synthetic-iid:3")


def test_draw_block_labels_are_the_argmax_of_the_devices_model():
    rng = np.random.default_rng(0)
    x, y = synthetic._draw_block(rng, np.array([5, 7]), None,
                                 (np.eye(60, 10), np.zeros(10)))
    assert np.array_equal(y, x[:, :10].argmax(1))
