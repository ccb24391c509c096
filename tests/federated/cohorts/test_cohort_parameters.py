"""Parameters a lone client's optimizer never steps -- frozen ones (``requires_grad``
False) and ones the forward pass does not use (their gradient stays None, so
``torch.optim`` skips them: no weight decay, no momentum) -- stay as they are in a cohort
too, while the others train as they do alone."""

import copy

import pytest
import torch
import torch.nn as nn

from mptrain.data.sources import CLASSIFICATION
from mptrain.engine.optim import build_optimizer
from mptrain.engine.step import train_step
from mptrain.federated.cohorts.trainer import CohortTrainer, stacked_rows
from mptrain.federated.cohorts.optimizer import ClientOptimizerSettings
from mptrain.federated.cohorts.batches import client_batches, stack_batches
from mptrain.federated.cohorts.check import check_cohort

from cohort_data import seeded_clients

ATOL, RTOL = 2e-6, 1e-5   # test_cohort's: the stacked kernels sum in another order
SIZES, BUDGETS, BATCH, EPOCHS = [23, 40, 7], [6, 8, 2], 8, 2


class PartlyTrained(nn.Module):
    """A frozen first layer (a pretrained feature extractor), a trained head, and a spare
    layer the forward pass never touches."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.features = nn.Linear(12, 16)
        self.spare = nn.Linear(5, 5)
        self.head = nn.Linear(16, 3)
        self.features.requires_grad_(False)

    def forward(self, x):
        return self.head(torch.tanh(self.features(x)))


SETTINGS = {
    "sgd, weight decay": ClientOptimizerSettings("sgd", lr=0.1, weight_decay=0.05),
    "momentum, weight decay": ClientOptimizerSettings("sgd", lr=0.05, momentum=0.9,
                                                      weight_decay=0.05),
    "adam, weight decay": ClientOptimizerSettings("adam", lr=0.01, weight_decay=0.05),
}


@pytest.fixture(scope="module")
def data():
    inputs, targets, clients = seeded_clients(SIZES)
    streams = [client_batches(idx, torch.Generator().manual_seed(100 + k), BATCH, EPOCHS,
                              BUDGETS[k]) for k, idx in enumerate(clients)]
    return inputs, targets, streams


def alone(model, data, settings):
    """Each client trained by ``torch.optim`` over all the model's parameters, as fedavg's
    one-at-a-time path builds its optimizer."""
    inputs, targets, streams = data
    start = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    updates = []
    for stream in streams:
        client = copy.deepcopy(model)
        optimizer = build_optimizer(list(client.parameters()), settings.name, settings.lr,
                                    settings.momentum, settings.weight_decay)
        for batch in stream:
            train_step(client, optimizer, inputs[batch], targets[batch], CLASSIFICATION)
        updates.append(torch.cat([p.detach().reshape(-1) for p in client.parameters()])
                       - start)
    return torch.stack(updates)


def together(model, data, settings):
    inputs, targets, streams = data
    trainer = CohortTrainer(model, CLASSIFICATION, settings, torch.device("cpu"))
    start = [p.detach() for p in model.parameters()]
    result = trainer.train(stack_batches(streams, BATCH),
                           lambda idx: (inputs[idx], targets[idx]), start)
    return stacked_rows(result, model) - torch.cat([p.reshape(-1) for p in start])


def spans(model):
    """Each parameter's span in the flat model, by name."""
    out, at = {}, 0
    for name, p in model.named_parameters():
        out[name] = slice(at, at + p.numel())
        at += p.numel()
    return out


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_frozen_and_unused_parameters_stay_put_as_alone(data, name):
    model = PartlyTrained()
    expected = alone(model, data, SETTINGS[name])
    updates = together(model, data, SETTINGS[name])
    where = spans(model)
    for still in ("features.weight", "features.bias", "spare.weight", "spare.bias"):
        assert not expected[:, where[still]].any()                  # torch.optim's way
        assert not updates[:, where[still]].any(), still
    assert updates[:, where["head.weight"]].abs().sum() > 0          # the head trained
    torch.testing.assert_close(updates, expected, atol=ATOL, rtol=RTOL)


def test_the_dry_run_takes_a_partly_trained_model():
    trainer = CohortTrainer(PartlyTrained(), CLASSIFICATION,
                            ClientOptimizerSettings("sgd", 0.1), torch.device("cpu"))
    generator = torch.Generator().manual_seed(0)
    check = check_cohort(trainer, torch.randn(5, 12, generator=generator),
                         torch.randint(0, 3, (5,), generator=generator))
    assert check.vectorizes, check.reason


def test_the_plain_pass_that_finds_them_is_not_counted_as_activations():
    """The dry run's memory estimate counts the stacked pass's outputs only: the plain
    pass before it (``find_trained``) would double a client's activations, halving the
    cohorts the memory budget allows."""
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(5, 12, generator=generator)
    targets = torch.randint(0, 3, (5,), generator=generator)
    fresh = CohortTrainer(PartlyTrained(), CLASSIFICATION,
                          ClientOptimizerSettings("sgd", 0.1), torch.device("cpu"))
    known = CohortTrainer(PartlyTrained(), CLASSIFICATION,
                          ClientOptimizerSettings("sgd", 0.1), torch.device("cpu"))
    known.trained = [False, False, False, False, True, True]   # found already: no pass
    assert check_cohort(fresh, inputs, targets).client_bytes == \
        check_cohort(known, inputs, targets).client_bytes
    assert fresh.trained == known.trained


class FrozenFirst(nn.Module):
    """The fedavg workload's model with its first layer frozen and a layer never used."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(7)
        self.features, self.spare, self.head = nn.Linear(6, 16), nn.Linear(2, 2), \
            nn.Linear(16, 3)
        self.features.requires_grad_(False)

    def forward(self, x):
        return self.head(torch.tanh(self.features(x)))


@pytest.mark.timeout(120)
def test_a_fedavg_run_with_frozen_layers_trains_as_one_at_a_time():
    import mptrain

    from fedavg_workload import RUN, make_data, make_test_data

    initial = FrozenFirst()
    runs = {mode: mptrain.fit(copy.deepcopy(initial), make_data(), make_test_data(),
                              **{**RUN, "workers": 1, "clients_per_round": 6,
                                 "momentum": 0.5, "weight_decay": 0.05,
                                 "vectorize_clients": mode})
            for mode in ("on", "off")}
    assert runs["on"].summary["client_path"].startswith("vectorized")
    on, off = runs["on"].model.state_dict(), runs["off"].model.state_dict()
    for name in ("features.weight", "features.bias", "spare.weight", "spare.bias"):
        assert torch.equal(on[name], initial.state_dict()[name]), name
    assert not torch.equal(on["head.weight"], initial.head.weight)
    for name, tensor in off.items():
        torch.testing.assert_close(on[name], tensor, atol=1e-5, rtol=0, msg=name)
