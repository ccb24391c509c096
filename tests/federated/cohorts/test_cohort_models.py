"""The published models (``models.federated_nets``) train stacked as their clients train
alone: embeddings of integer inputs, LSTMs (through ``stackable``'s twin), GroupNorm,
convolutions; and an LSTM twin computes what ``nn.LSTM`` computes, in every configuration
the twin accepts."""

import copy

import pytest
import torch
import torch.nn as nn

from mptrain.data.sources import CLASSIFICATION
from mptrain.engine.optim import build_optimizer
from mptrain.engine.step import train_step
from mptrain.federated.cohorts.batches import client_batches, stack_batches
from mptrain.federated.cohorts.check import check_cohort
from mptrain.federated.cohorts.optimizer import ClientOptimizerSettings
from mptrain.federated.cohorts.stackable import StackableLSTM, stackable
from mptrain.federated.cohorts.trainer import CohortTrainer, stacked_rows
from mptrain.models import build_model
from mptrain.models.federated_nets import ResNet18GN, _BasicBlock

pytestmark = pytest.mark.timeout(120)

SETTINGS = ClientOptimizerSettings("sgd", lr=0.1, momentum=0.5)
SIZES, BATCH = [7, 4, 0, 9], 3     # one client without samples; short last batches


def model_data(name: str):
    """A model by name and seeded data of its inputs' shape and dtype. The Shakespeare
    model's sequences are 12 characters here, not LEAF's 80 (same code, less time), stored
    as uint8 as LEAF's loader stores them."""
    generator = torch.Generator().manual_seed(3)
    n = sum(SIZES)
    if name == "leaf-shakespeare-lstm":
        shape, classes = (12,), 80
        inputs = torch.randint(0, 80, (n, 12), generator=generator, dtype=torch.uint8)
    elif name == "mclr":
        shape, classes = (60,), 10
        inputs = torch.randn(n, 60, generator=generator)
    elif name == "leaf-femnist-cnn":
        shape, classes = (1, 28, 28), 62
        inputs = torch.rand(n, 1, 28, 28, generator=generator)
    else:   # GroupNorm's: resnet18-gn's blocks, fewer and narrower (a test's time)
        shape, classes = (3, 8, 8), 10
        inputs = torch.randn(n, 3, 8, 8, generator=generator)
    targets = torch.randint(0, classes, (n,), generator=generator)
    bounds = torch.tensor([0] + SIZES).cumsum(0)
    clients = [torch.arange(bounds[k], bounds[k + 1]) for k in range(len(SIZES))]
    if name == "groupnorm-blocks":
        torch.manual_seed(0)
        model = nn.Sequential(_BasicBlock(3, 8, 1, 2), _BasicBlock(8, 16, 2, 4),
                              nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))
        return model, inputs, targets, clients
    return build_model(name, shape, classes), inputs, targets, clients


def streams(clients):
    return [client_batches(idx.cpu(), torch.Generator().manual_seed(10 + k), BATCH, 1, 2)
            for k, idx in enumerate(clients)]


def alone(model, inputs, targets, clients):
    start = [p.detach().clone() for p in model.parameters()]
    updates = []
    for stream in streams(clients):
        client = copy.deepcopy(model)
        optimizer = build_optimizer(list(client.parameters()), SETTINGS.name, SETTINGS.lr,
                                    SETTINGS.momentum, SETTINGS.weight_decay)
        for batch in stream:
            train_step(client, optimizer, inputs[batch], targets[batch], CLASSIFICATION)
        updates.append(torch.cat([(p.detach() - s).reshape(-1)
                                  for p, s in zip(client.parameters(), start)]))
    return torch.stack(updates)


def together(model, inputs, targets, clients, device=torch.device("cpu")):
    trainer = CohortTrainer(model, CLASSIFICATION, SETTINGS, device)
    start = [p.detach().clone() for p in model.parameters()]
    result = trainer.train(stack_batches(streams(clients), BATCH),
                           lambda idx: (inputs[idx.to(device)], targets[idx.to(device)]),
                           start)
    return stacked_rows(result, model) - torch.cat([p.reshape(-1) for p in start])


#: Tolerances of a client's update after two steps: stacked kernels sum in another order
#: than the lone client's (a batched matrix product, a grouped convolution, and for the
#: LSTM the twin's step-by-step products against oneDNN's fused kernel), so the last bits
#: differ; the largest differences seen were below 1e-7 on updates of ~1e-2.
ATOL, RTOL = 2e-6, 1e-4


@pytest.mark.parametrize("name", ["leaf-shakespeare-lstm", "mclr", "leaf-femnist-cnn",
                                  "groupnorm-blocks"])
def test_each_published_model_trains_stacked_as_alone(name):
    model, inputs, targets, clients = model_data(name)
    expected = alone(model, inputs, targets, clients)
    updates = together(model, inputs, targets, clients)
    assert updates.abs().sum(1)[[0, 1, 3]].min() > 0          # every real client moved
    assert torch.equal(updates[2], torch.zeros_like(updates[2]))
    torch.testing.assert_close(updates, expected, atol=ATOL, rtol=RTOL)


def test_resnet18_gn_gradients_stacked_are_each_clients_alone():
    """ResNet-18 with GroupNorm (on 8x8 images: the same layers, a 16th of the time of
    32x32): one stacked gradient of two clients is each client's own. A gradient, not an
    update after steps: from random initialisation 18 layers amplify the last-bit
    differences of two SGD steps to ~1e-3 (seen), while one gradient agrees to ~2e-6 of its
    largest entry."""
    torch.manual_seed(0)
    model = ResNet18GN(3, 10)
    trainer = CohortTrainer(model, CLASSIFICATION, SETTINGS, torch.device("cpu"))
    generator = torch.Generator().manual_seed(4)
    x = torch.randn(2, 3, 3, 8, 8, generator=generator)
    y = torch.randint(0, 10, (2, 3), generator=generator)
    params = [p.detach().unsqueeze(0).repeat(2, *[1] * p.dim()) for p in model.parameters()]
    grads, losses = trainer.gradients(params, x, y, torch.ones(2, 3))
    for k in range(2):
        model.zero_grad()
        loss = nn.functional.cross_entropy(model(x[k]), y[k])
        loss.backward()
        torch.testing.assert_close(losses[k], loss.detach(), atol=1e-6, rtol=1e-5)
        for p, stacked in zip(model.parameters(), grads):
            scale = p.grad.abs().max().item()
            torch.testing.assert_close(stacked[k], p.grad, atol=1e-5 * scale, rtol=0)


def test_character_indices_reach_the_embedding_as_integers():
    """uint8 inputs are indices: the stacked path gathers rows with them, never casts them
    to float (a float index would fail the embedding, or with a cast, round)."""
    model, inputs, targets, clients = model_data("leaf-shakespeare-lstm")
    seen = []
    model.embedding.register_forward_pre_hook(lambda m, args: seen.append(args[0].dtype))
    together(model, inputs, targets, clients)
    assert seen and set(seen) == {torch.int64}    # the model's own x.long(), from uint8


@pytest.mark.parametrize("options", [
    dict(batch_first=True, num_layers=2),
    dict(num_layers=1, bias=False),
    dict(num_layers=2, bidirectional=True),
    dict(num_layers=2, proj_size=3),
    dict(num_layers=3, batch_first=True, bidirectional=True, proj_size=2),
])
def test_the_lstm_twin_computes_what_nn_lstm_computes(options):
    torch.manual_seed(0)
    lstm = nn.LSTM(5, 7, **options)
    twin = stackable(lstm)
    assert isinstance(twin, StackableLSTM)
    assert [n for n, _ in twin.named_parameters()] == [n for n, _ in lstm.named_parameters()]
    assert all(a is b for a, b in zip(twin.parameters(), lstm.parameters()))   # shared
    x = torch.randn(4, 6, 5)
    expected, (h, c) = lstm(x)
    got, (h2, c2) = twin(x)
    for a, b in ((expected, got), (h, h2), (c, c2)):
        torch.testing.assert_close(b, a, atol=1e-6, rtol=1e-5)
    state = (torch.randn_like(h), torch.randn_like(c))
    torch.testing.assert_close(twin(x, state)[0], lstm(x, state)[0], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(twin(x[0])[0], lstm(x[0])[0], atol=1e-6, rtol=1e-5)


def test_a_twin_shares_the_models_tensors_and_leaves_the_model_as_it_was():
    model, *_ = model_data("leaf-shakespeare-lstm")
    twin = stackable(model)
    assert twin is not model and type(model.lstm) is nn.LSTM
    assert type(twin.lstm) is StackableLSTM
    assert all(a is b for a, b in zip(twin.parameters(), model.parameters()))
    plain = nn.Sequential(nn.Linear(3, 2))
    assert stackable(plain) is plain              # nothing to rewrite: the model itself


def test_lstm_dropout_between_layers_draws_per_client_masks():
    """Dropout between an LSTM's layers runs in the twin as ``F.dropout``: vmap draws each
    client's own mask, and the cohort still trains (no error from an unbatched random
    call)."""
    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(4, 6, num_layers=2, dropout=0.5, batch_first=True)
            self.fc = nn.Linear(6, 3)

        def forward(self, x):
            return self.fc(self.lstm(x)[0][:, -1])

    model = Net()
    trainer = CohortTrainer(model, CLASSIFICATION, SETTINGS, torch.device("cpu"))
    x = torch.randn(5, 7, 4)
    check = check_cohort(trainer, x, torch.randint(0, 3, (5,)))
    assert check.vectorizes, check.reason


def test_a_clients_memory_counts_what_the_lstm_twin_keeps_for_backward():
    """The twin keeps every step's gates and states: ~12 x hidden floats a character a
    layer, 40 times its output at LEAF's shape; the check's estimate of a client's memory
    must hold them, or a CPU cohort sized from it would not fit."""
    model, *_ = model_data("leaf-shakespeare-lstm")
    trainer = CohortTrainer(model, CLASSIFICATION, SETTINGS, torch.device("cpu"))
    inputs = torch.randint(0, 80, (10, 80), dtype=torch.uint8)
    check = check_cohort(trainer, inputs, torch.randint(0, 80, (10,)))
    kept = 10 * 80 * 2 * StackableLSTM.SAVED_PER_STEP * 256 * 4      # 39 MB
    assert check.vectorizes and check.client_bytes > kept
