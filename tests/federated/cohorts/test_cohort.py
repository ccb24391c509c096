"""A cohort of clients trained stacked gives each client the update it gets trained alone
(``torch.optim``, the one-at-a-time path's step), within float tolerance, for every client
algorithm; and the same update bitwise from run to run."""

import copy

import pytest
import torch
import torch.nn as nn

from mptrain.data.sources import CLASSIFICATION
from mptrain.engine.optim import build_optimizer
from mptrain.engine.step import train_step
from mptrain.federated import scaffold
from mptrain.federated.client import add_proximal_gradient_
from mptrain.federated.cohorts.trainer import CohortTrainer, stacked_rows
from mptrain.federated.cohorts.optimizer import ClientOptimizerSettings, StackedOptimizer
from mptrain.federated.cohorts.batches import client_batches, stack_batches
from mptrain.federated.privacy import clip_

from cohort_data import seeded_clients

#: Each client's update (``result - global``) after a round of up to 12 local steps: the
#: stacked kernels sum in another order than the lone client's, so the last bits differ
#: (observed: below 2e-7 absolute on updates of size ~1e-1).
ATOL, RTOL = 2e-6, 1e-5

#: Clients of unequal sizes (the last batch of an epoch is short), one empty, and budgets
#: below full (stragglers).
SIZES = [23, 40, 7, 0, 31]
BUDGETS = [6, 8, 2, 0, 3]
BATCH, EPOCHS = 8, 2


def small_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(12, 16), nn.Tanh(), nn.Linear(16, 3))


@pytest.fixture(scope="module")
def data():
    return seeded_clients(SIZES)


def streams(clients):
    return [client_batches(idx, torch.Generator().manual_seed(100 + k), BATCH, EPOCHS,
                           BUDGETS[k]) for k, idx in enumerate(clients)]


def alone(model, data, settings, prox_mu=0.0, corrections=None):
    """The reference: every client one after another, torch.optim's step."""
    inputs, targets, clients = data
    start = [p.detach().clone() for p in model.parameters()]
    updates = []
    for k, stream in enumerate(streams(clients)):
        client = copy.deepcopy(model)
        params = list(client.parameters())
        optimizer = build_optimizer(params, settings.name, settings.lr, settings.momentum,
                                    settings.weight_decay)
        views = None
        if corrections is not None:
            views = [v.view_as(p) for v, p in
                     zip(corrections[k].split([p.numel() for p in params]), params)]

        def correct():
            if prox_mu:
                add_proximal_gradient_(params, start, prox_mu)
            if views is not None:
                scaffold.add_correction_(params, views)

        for batch in stream:
            train_step(client, optimizer, inputs[batch], targets[batch], CLASSIFICATION,
                       correct if (prox_mu or views is not None) else None)
        updates.append(torch.cat([(p.detach() - s).reshape(-1)
                                  for p, s in zip(params, start)]))
    return torch.stack(updates)


def together(model, data, settings, prox_mu=0.0, corrections=None, seed=0):
    inputs, targets, clients = data
    trainer = CohortTrainer(model, CLASSIFICATION, settings, torch.device("cpu"),
                            prox_mu=prox_mu)
    plan = stack_batches(streams(clients), BATCH)
    start = [p.detach() for p in model.parameters()]
    result = trainer.train(plan, lambda idx: (inputs[idx], targets[idx]), start,
                           corrections=corrections, mask_seed=seed)
    flat_start = torch.cat([p.reshape(-1) for p in start])
    return stacked_rows(result, model) - flat_start, result


SETTINGS = {
    "sgd": ClientOptimizerSettings("sgd", lr=0.1),
    "momentum": ClientOptimizerSettings("sgd", lr=0.05, momentum=0.9, weight_decay=1e-3),
    "adam": ClientOptimizerSettings("adam", lr=0.01, weight_decay=1e-4),
}


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_each_client_gets_the_update_it_gets_alone(data, name):
    model = small_model()
    expected = alone(model, data, SETTINGS[name])
    updates, result = together(model, data, SETTINGS[name])
    assert updates.abs().sum(1)[[0, 1, 2, 4]].min() > 0     # every real client moved
    assert torch.equal(updates[3], torch.zeros_like(updates[3]))   # the empty one did not
    torch.testing.assert_close(updates, expected, atol=ATOL, rtol=RTOL)
    assert result.steps == BUDGETS and result.samples == [46, 64, 14, 0, 24]


def test_fedprox_pulls_each_client_as_alone(data):
    model = small_model()
    settings = SETTINGS["sgd"]
    expected = alone(model, data, settings, prox_mu=0.5)
    updates, _ = together(model, data, settings, prox_mu=0.5)
    torch.testing.assert_close(updates, expected, atol=ATOL, rtol=RTOL)
    assert not torch.allclose(expected, alone(model, data, settings))   # mu mattered


def test_scaffold_corrects_each_client_by_its_own_variate(data):
    model = small_model()
    numel = sum(p.numel() for p in model.parameters())
    server = torch.randn(numel, generator=torch.Generator().manual_seed(3)) * 0.1
    client_controls = torch.randn(len(SIZES), numel,
                                  generator=torch.Generator().manual_seed(4)) * 0.1
    corrections = torch.stack([scaffold.drift_correction(server, c) for c in client_controls])
    settings = SETTINGS["sgd"]
    expected = alone(model, data, settings, corrections=corrections)
    updates, result = together(model, data, settings, corrections=corrections)
    torch.testing.assert_close(updates, expected, atol=ATOL, rtol=RTOL)
    # and the variates each client reports from its update follow within the same bounds
    start = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    for k in (0, 1, 2, 4):
        deltas = []
        for update in (updates[k], expected[k]):
            control = client_controls[k].clone()
            delta = torch.empty(numel)
            scaffold.update_client_control_(control, server, start, start + update,
                                            result.steps[k], settings.lr, delta)
            deltas.append(delta)
        torch.testing.assert_close(deltas[0], deltas[1], atol=1e-4, rtol=1e-4)


def test_dp_clipping_of_each_client_matches_alone(data):
    model = small_model()
    expected = alone(model, data, SETTINGS["sgd"])
    updates, _ = together(model, data, SETTINGS["sgd"])
    clip = 0.8 * float(expected.norm(dim=1).median())   # clips some, not all
    for k in range(len(SIZES)):
        mine, theirs = updates[k].clone(), expected[k].clone()
        assert (clip_(mine, clip) > clip) == (clip_(theirs, clip) > clip)
        torch.testing.assert_close(mine, theirs, atol=ATOL, rtol=RTOL)
        assert float(mine.norm()) <= clip * (1 + 1e-6)


def test_a_cohort_is_bitwise_reproducible_with_dropout(data):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 3))
    first, _ = together(model, data, SETTINGS["adam"], seed=7)
    second, _ = together(model, data, SETTINGS["adam"], seed=7)
    other, _ = together(model, data, SETTINGS["adam"], seed=8)
    assert torch.equal(first, second)
    assert not torch.equal(first, other)           # the masks are drawn, and per seed
    # each client its own masks: two clients with the same batches from the same start
    # differ only through them
    inputs, targets, clients = data
    trainer = CohortTrainer(model, CLASSIFICATION, SETTINGS["sgd"], torch.device("cpu"))
    twin = streams(clients)[1]
    twins = trainer.train(stack_batches([twin, twin], BATCH),
                          lambda idx: (inputs[idx], targets[idx]),
                          [p.detach() for p in model.parameters()], mask_seed=7)
    assert not torch.equal(twins.params[0][0], twins.params[0][1])
    # and without the dropout layer the twins are bitwise equal
    plain = CohortTrainer(nn.Sequential(*list(model)[:2], *list(model)[3:]), CLASSIFICATION,
                          SETTINGS["sgd"], torch.device("cpu"))
    same = plain.train(stack_batches([twin, twin], BATCH),
                       lambda idx: (inputs[idx], targets[idx]),
                       [p.detach() for p in model.parameters()])
    assert torch.equal(same.params[0][0], same.params[0][1])


def test_padded_steps_change_nothing(data):
    """A client's update does not depend on who shares its cohort (how long the others
    train, hence how many padded steps it sits through)."""
    inputs, targets, clients = data
    model = small_model()
    trainer = CohortTrainer(model, CLASSIFICATION, SETTINGS["momentum"], torch.device("cpu"))
    start = [p.detach() for p in model.parameters()]
    batch = lambda idx: (inputs[idx], targets[idx])   # noqa: E731
    every = streams(clients)
    both = trainer.train(stack_batches([every[2], every[1]], BATCH), batch, start)
    lone = trainer.train(stack_batches([every[2]], BATCH), batch, start)
    for stacked, single in zip(both.params, lone.params):
        assert torch.equal(stacked[0], single[0])


def test_finite_clients_says_what_the_row_check_says():
    """The cohort's cheap check (a sum per client) agrees with ``update_is_finite`` on each
    client's row, including a client whose finite values sum past float32's range."""
    from mptrain.federated.client import update_is_finite
    from mptrain.federated.cohorts.trainer import finite_clients

    weights, biases = torch.randn(5, 3, 4), torch.randn(5, 3)
    weights[1, 2, 0] = float("nan")
    biases[2, 1] = float("inf")
    weights[3] = 3e38                     # every value finite, their sum is not
    biases[4, 0] = -float("inf")
    params = [weights, biases]
    rows = [torch.cat([p[k].reshape(-1) for p in params]) for k in range(5)]
    assert finite_clients(params) == [update_is_finite(row) for row in rows] \
        == [True, False, False, True, False]


@pytest.mark.parametrize("name", sorted(SETTINGS))
@pytest.mark.parametrize("clients", [1, 5])
def test_a_cohort_never_writes_its_start(data, name, clients):
    """The clients share the global model's tensors until their first step (expanded, not
    copied): training must leave those tensors as they were, a cohort of one included."""
    inputs, targets, every = data
    model = small_model()
    start = [p.detach() for p in model.parameters()]
    before = [p.clone() for p in start]
    trainer = CohortTrainer(model, CLASSIFICATION, SETTINGS[name], torch.device("cpu"),
                            prox_mu=0.1)
    result = trainer.train(stack_batches(streams(every)[:clients], BATCH),
                           lambda idx: (inputs[idx], targets[idx]), start)
    assert all(torch.equal(p, b) for p, b in zip(start, before))
    assert not torch.equal(result.params[0][0], before[0])   # and the client did move
    assert all(p.is_contiguous() for p in result.params)


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_the_first_step_from_a_shared_start_is_the_step_from_copies(name):
    """``StackedOptimizer`` from the start expanded over the clients (the first step writes
    each client's tensors out of place) gives every parameter and state tensor bitwise what
    it gives from a copy per client (updated in place), over steps where some clients sit
    out (the second client on the first step, the third on the third)."""
    generator = torch.Generator().manual_seed(5)
    start = [torch.randn(4, 3, generator=generator), torch.randn(4, generator=generator)]
    grads = [[torch.randn(3, *p.shape, generator=generator) for p in start]
             for _ in range(3)]
    actives = [torch.tensor([True, False, True]), None, torch.tensor([True, True, False])]
    shared = StackedOptimizer(SETTINGS[name],
                              [p.unsqueeze(0).expand(3, *p.shape) for p in start],
                              shared_start=True)
    copies = StackedOptimizer(SETTINGS[name],
                              [p.unsqueeze(0).repeat(3, *([1] * p.dim())) for p in start])
    for step_grads, active in zip(grads, actives):
        shared.step([g.clone() for g in step_grads], active)
        copies.step([g.clone() for g in step_grads], active)
        for mine, theirs in zip(shared._state(), copies._state()):
            assert torch.equal(mine, theirs)
    assert torch.equal(shared.params[0][1], copies.params[0][1])
    assert not torch.equal(shared.params[0][0], start[0])


def test_a_client_outcome_says_whether_its_flat_copy_is_finite():
    """A float64 model's client can be finite in float64 and not once copied into the
    float32 table: a value beyond float32's range arrives as an infinity. The outcome's
    verdict is about the copy it is asked about."""
    from mptrain.federated.cohorts.clients import ClientOutcome

    big = ClientOutcome(0, [torch.tensor([1.0, 1e39], dtype=torch.float64)], 1, 1, 0.0,
                        finite=True)
    assert big.is_finite(big.flat())                                  # float64: finite
    row = torch.zeros(2)
    assert not big.is_finite(big.flat(out=row))                       # float32: inf
    assert torch.isinf(row[1])
    small = ClientOutcome(1, [torch.tensor([1.0, 2.0], dtype=torch.float64)], 1, 1, 0.0,
                          finite=True)
    assert small.is_finite(small.flat(out=torch.zeros(2)))
    poisoned = ClientOutcome(2, [torch.tensor([1.0, float("nan")])], 1, 1, 0.0,
                             finite=False)
    assert not poisoned.is_finite(poisoned.flat(out=torch.zeros(2, dtype=torch.float64)))


def test_a_cohort_counts_its_samples_once_and_takes_them_back_when_it_raises(data):
    """Progress counts each client's samples once: a cohort counts them step by step as it
    trains, and one that raises midway (its clients are then trained one at a time, and
    counted again) takes back what it counted."""
    from mptrain.federated.cohorts.clients import ClientWork, train_cohort

    inputs, targets, every = data
    model = small_model()
    trainer = CohortTrainer(model, CLASSIFICATION, SETTINGS["sgd"], torch.device("cpu"))
    work = ClientWork(seed=3, batch_size=BATCH, local_epochs=EPOCHS)
    start = [p.detach() for p in model.parameters()]

    def run(batch):
        counted = []
        outcomes = list(train_cohort(trainer, range(len(every)), 0, work, every,
                                     batch, start, lr=0.1, on_step=counted.append))
        return counted, outcomes

    counted, outcomes = run(lambda idx: (inputs[idx], targets[idx]))
    assert len(counted) > 3 and sum(counted) == sum(o.samples for o in outcomes) \
        == EPOCHS * sum(SIZES)

    calls = []

    def out_of_memory_at_the_fifth_step(idx):
        calls.append(idx)
        if len(calls) == 5:
            raise RuntimeError("out of memory (simulated)")
        return inputs[idx], targets[idx]

    counted = []
    with pytest.raises(RuntimeError, match="simulated"):
        list(train_cohort(trainer, range(len(every)), 0, work, every,
                          out_of_memory_at_the_fifth_step, start, lr=0.1,
                          on_step=counted.append))
    assert len(counted) == 5 and min(counted[:4]) > 0     # four steps, then taken back
    assert sum(counted) == 0
