"""The local steps personalization adds to FedAvg's, as one plain loop: a client's own
samples in seeded shuffled batches, for a number of epochs or of steps. Fine-tuning runs
STEPS steps from the global model before a client is scored; FedRep trains its head with
the body frozen; Ditto trains the client's personal model with a proximal pull to the
round's global model (the gradient of ``lambda/2 * ||v - w||^2``: FedProx's term, on the
personal model instead of the update).

Each loop draws its own batch order from its own seed (``personal_seed``), so adding it
changes nothing of the client's FedAvg update: Ditto's global model is FedAvg's, bit for
bit.
"""

from __future__ import annotations

import torch

from ...engine.seeding import seed_global_generator
from ...engine.step import train_step
from ..sampling import client_seed, mix_seed

#: Mixed into the run's seed so each kind of personal loop has a stream of its own.
SEED_TAGS = {"finetune": 0x5EED0001, "head": 0x5EED0002, "ditto": 0x5EED0003}


def loop_seed(seed: int, kind: str) -> int:
    """The run seed of every ``kind`` loop: a stacked cohort given it as its seed draws each
    client's batches as ``personal_seed`` does (``client_seed`` of it)."""
    return mix_seed(seed, SEED_TAGS[kind])


def personal_seed(seed: int, round_index: int, client: int, kind: str) -> int:
    """The seed of ``client``'s ``kind`` loop in ``round_index``."""
    return client_seed(loop_seed(seed, kind), round_index, client)


def run_local_steps(forward, optimizer, feed, indices: torch.Tensor, batch_size: int,
                    task: str, seed: int, device, *, epochs: int | None = None,
                    steps: int | None = None, after_backward=None,
                    beat=None, transform=None) -> tuple[int, int]:
    """Train on ``indices`` (a client's samples) in shuffled batches of ``batch_size``:
    ``epochs`` passes, or ``steps`` steps (passes repeated as needed). Returns the steps
    and samples taken. ``after_backward``: a gradient correction (Ditto's pull);
    ``transform``: the run's ``data.batch_transform.BatchTransform``, each batch's draws
    seeded by (``seed``, step)."""
    if len(indices) == 0:
        return 0, 0
    generator = torch.Generator().manual_seed(seed)
    seed_global_generator(seed, device)   # dropout draws from the global generator
    taken = samples = passes = 0
    while (steps is None and passes < epochs) or (steps is not None and taken < steps):
        order = indices[torch.randperm(len(indices), generator=generator)]
        for _, batch, inputs, targets in feed.batches(
                enumerate(torch.split(order, batch_size))):
            if steps is not None and taken == steps:
                break
            if transform is not None:
                inputs, targets = transform.apply(inputs, targets, (seed, taken))
            train_step(forward, optimizer, inputs, targets, task, after_backward)
            taken += 1
            samples += len(batch)
            if beat is not None:
                beat()
        passes += 1
    return taken, samples
