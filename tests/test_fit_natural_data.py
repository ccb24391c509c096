"""fit() on natural data: the bundle of load_data carries its clients and its recipe, so
fedavg trains one client per device without being told how many."""

import pytest

import mptrain
from mptrain.errors import UserError
from mptrain.models import build_model

pytestmark = pytest.mark.timeout(120)


def test_fit_trains_the_natural_clients_of_a_loaded_bundle():
    bundle = mptrain.load_data("synthetic:1,1", clients=8, seed=0)
    model = build_model(bundle.default_model, bundle.input_shape, bundle.output_size)
    result = mptrain.fit(model, bundle, strategy="fedavg", workers=2, threads_per_worker=1,
                         rounds=1, local_epochs=1, clients_per_round=2)
    assert result.config.fedavg.clients == 8
    assert result.config.fedavg.partition == "natural"


def test_fit_cuts_the_pooled_data_when_told():
    bundle = mptrain.load_data("synthetic:0,0", seed=0)
    model = build_model("mclr", bundle.input_shape, bundle.output_size)
    result = mptrain.fit(model, bundle, strategy="fedavg", workers=2, threads_per_worker=1,
                         rounds=1, local_epochs=1, clients=6, clients_per_round=2,
                         partition="pathological:2")
    assert result.config.fedavg.partition == "pathological:2"


def test_fit_refuses_a_client_count_the_data_does_not_have():
    bundle = mptrain.load_data("synthetic:0,0", seed=0)
    model = build_model("mclr", bundle.input_shape, bundle.output_size)
    with pytest.raises(UserError, match="clients 7, but synthetic:0,0 has 30 natural"):
        mptrain.fit(model, bundle, strategy="fedavg", workers=2, rounds=1, clients=7,
                    clients_per_round=2)
