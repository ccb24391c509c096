"""Clients of a small classification task for the cohort tests: the same seeded inputs and
targets, cut into consecutive clients of the given sizes."""

import torch


def seeded_clients(sizes: list[int], features: int = 12, classes: int = 3):
    """``(inputs, targets, clients)``: ``clients[k]`` the indices of client ``k``'s samples."""
    generator = torch.Generator().manual_seed(1)
    inputs = torch.randn(sum(sizes), features, generator=generator)
    targets = torch.randint(0, classes, (sum(sizes),), generator=generator)
    bounds = torch.tensor([0] + sizes).cumsum(0)
    clients = [torch.arange(bounds[k], bounds[k + 1]) for k in range(len(sizes))]
    return inputs, targets, clients
