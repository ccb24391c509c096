"""A real fedavg run on LEAF's Shakespeare (``--data leaf:DIR``, the LSTM over uint8
characters): stacked and one at a time give the same model to float rounding, and auto
trains the LSTM one client at a time, saying why."""

import copy

import pytest
import torch

import mptrain
from mptrain.data.sources import load_data
from mptrain.models import build_model

from leaf_files import shakespeare_user, write_leaf

#: Two rounds of two clients of a few steps: the twin's LSTM sums in another order than
#: oneDNN's fused kernel (``test_cohort_models``: ~1e-7 a step); averaging keeps it there.
ATOL = 1e-5


@pytest.mark.timeout(300)
def test_shakespeare_clients_train_stacked_as_one_at_a_time(tmp_path):
    write_leaf(tmp_path, lambda rng, n: shakespeare_user(rng, n, width=16), files=1,
               users_per_file=4, train=6, test=2)
    data = load_data(f"leaf:{tmp_path}")
    assert data.train.inputs.dtype == torch.uint8
    initial = build_model("leaf-shakespeare-lstm", data.input_shape, data.output_size)
    # One thread: the worker is forked. With two, after this process ran the LSTM on
    # OpenMP threads, each run's worker came from the fork server and set itself up afresh
    # (three times this test's time under load, none of its proof).
    settings = dict(strategy="fedavg", workers=1, rounds=2, clients_per_round=2,
                    local_epochs=1, batch_size=4, lr=0.5, optimizer="sgd", seed=0,
                    threads_per_worker=1)
    runs = {mode: mptrain.fit(copy.deepcopy(initial), data, vectorize_clients=mode,
                              **settings) for mode in ("off", "on", "auto")}
    assert runs["on"].summary["client_path"] == "vectorized x2"
    assert runs["auto"].summary["client_path"].startswith(
        "one client at a time: recurrent layers (lstm)")
    on, off = runs["on"].model.state_dict(), runs["off"].model.state_dict()
    moved = False
    for name, tensor in off.items():
        torch.testing.assert_close(on[name], tensor, atol=ATOL, rtol=0, msg=name)
        moved |= not torch.equal(tensor, initial.state_dict()[name])
    assert moved
    for name, tensor in runs["auto"].model.state_dict().items():   # auto took off's path
        assert torch.equal(tensor, off[name]), name
