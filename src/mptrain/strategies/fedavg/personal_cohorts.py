"""FedPer in stacked cohorts (``--personalize fedper`` with ``--vectorize-clients``): each
client's personal layers are its own slice of the stacked parameters, started from its row
of the store (the global model's where it has none yet); the shared layers start from the
global model as every cohort's do. After the cohort each client's personal slices go to the
store and its outcome sends the global model's values in those columns -- what
``PersonalTrainer`` does one client at a time, so the two paths train the same model to
float rounding (tested).

Only FedPer stacks: FedRep's two phases, FedBN's statistics (a cohort never changes
buffers) and Ditto's second model per client train one client at a time
(``personal_setup.one_at_a_time_reason``).
"""

from __future__ import annotations

import torch


def personal_starts(trainer, clients: list[int], device) -> dict[int, torch.Tensor] | None:
    """``{parameter position: [K, *shape]}``: each client's start of its personal layers
    (None: the trainer keeps nothing personal)."""
    store = getattr(trainer, "store", None)
    if store is None:
        return None
    starts = {}
    for position, tensor in zip(trainer.personal_positions, trainer.personal):
        starts[position] = torch.stack([tensor.detach().clone() for _ in clients])
    offset = 0
    for position, tensor in zip(trainer.personal_positions, trainer.personal):
        for k, client in enumerate(clients):
            if store.has(client):
                row = store.row(client)[offset:offset + tensor.numel()]
                starts[position][k].copy_(row.view_as(tensor))
        offset += tensor.numel()
    return {position: start.to(device) for position, start in starts.items()}


def keep_personal(trainer, outcomes) -> list:
    """Store each outcome's personal slices, and put the global model's in their place
    (a zero update there: never averaged). ``trainer.personal`` holds the global model's
    values here: the cohort trained from a copy, never from the worker's model."""
    store = getattr(trainer, "store", None)
    if store is None:
        return outcomes
    global_pieces = [tensor.detach().reshape(-1) for tensor in trainer.personal]
    for outcome in outcomes:
        mine = [outcome.pieces[position] for position in trainer.personal_positions]
        store.put(outcome.client, torch.cat([piece.cpu() for piece in mine]))
        for position, piece in zip(trainer.personal_positions, global_pieces):
            outcome.pieces[position] = piece
    return outcomes
