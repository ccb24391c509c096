"""The tiny fedavg workload the strategy's tests share: 240 samples of 6 features, 3
classes from a random teacher, a 60-sample test set, a two-layer model."""

import torch
import torch.nn as nn
from torch.utils.data import TensorDataset

SAMPLES, FEATURES, CLASSES = 240, 6, 3
RUN = dict(strategy="fedavg", rounds=3, clients=12, clients_per_round=4, batch_size=8,
           lr=0.2, momentum=0.0, optimizer="sgd", seed=0, threads_per_worker=1, quiet=True)
POISON = 1e6


def make_data(poisoned_index=None, poison=POISON):
    """The training set; ``poisoned_index``: samples whose every feature is ``poison``."""
    generator = torch.Generator().manual_seed(1234)
    inputs = torch.randn(SAMPLES, FEATURES, generator=generator)
    targets = (inputs @ torch.randn(FEATURES, CLASSES, generator=generator)).argmax(dim=1)
    if poisoned_index is not None:
        inputs[poisoned_index] = poison
    return TensorDataset(inputs, targets)


def make_test_data():
    full = make_data()
    return TensorDataset(full.tensors[0][:60], full.tensors[1][:60])


def make_model(seed=7):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(FEATURES, 16), nn.Tanh(), nn.Linear(16, CLASSES))
