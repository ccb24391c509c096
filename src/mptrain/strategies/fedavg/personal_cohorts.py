"""FedPer and Ditto in stacked cohorts (``--personalize`` with ``--vectorize-clients``).

- FedPer: each client's personal layers are its own slice of the stacked parameters,
  started from its row of the store (the global model's where it has none yet); the shared
  layers start from the global model as every cohort's do. After the cohort each client's
  personal slices go to the store and its outcome sends the global model's values in those
  columns.
- FedRep: a first cohort trains the heads alone (each client's own start, the body the
  global model's and held), for ``--personal-head-epochs`` on FedRep's own seed without
  FedProx's pull or straggling; then the FedAvg cohort trains the bodies from the global
  model with those heads held, and each head goes to the store as FedPer's does.
- Ditto: after the cohort's FedAvg update, a second cohort trains the clients' personal
  models, each started from its row of the store, with the pull to the global model as
  FedProx's term of strength lambda (``CohortTrainer``'s ``prox_mu``), its batches drawn
  from Ditto's own seed, and no straggling -- as ``PersonalTrainer`` does it.

Either way what ``PersonalTrainer`` does one client at a time, so the paths train the same
models to float rounding (tested). FedBN stacks as FedPer does where its layers have no running
statistics (GroupNorm, LayerNorm); personal buffers (BatchNorm's statistics: a cohort never
changes buffers) train one client at a time (``personal_setup.one_at_a_time_reason``).
"""

from __future__ import annotations

import torch


def fedavg_starts(trainer, clients: list[int], device) -> dict[int, torch.Tensor] | None:
    """Where the FedAvg cohort's clients start other than the global model: FedPer's
    personal layers (None: everywhere else, Ditto's FedAvg update included; FedRep's
    heads come from ``FedRepCohort``)."""
    if getattr(trainer, "store", None) is None or not trainer.spec.layered:
        return None
    return personal_starts(trainer, clients, device)


def personal_starts(trainer, clients: list[int], device) -> dict[int, torch.Tensor]:
    """``{parameter position: [K, *shape]}``: each client's start of its personal
    parameters (the global model's where it has none yet)."""
    store = trainer.store
    params, starts, offset = len(trainer.params), {}, 0
    for position, tensor in zip(trainer.personal_positions, trainer.personal):
        if position >= params:
            break   # buffers: a cohort never changes them (the layout puts them last)
        start = torch.stack([tensor.detach().cpu() for _ in clients])
        for k, client in enumerate(clients):
            if store.has(client):
                start[k].copy_(store.row(client)[offset:offset + tensor.numel()]
                               .view_as(tensor))
        starts[position] = start.to(device)
        offset += tensor.numel()
    return starts


def keep_personal(trainer, outcomes) -> list:
    """Store each outcome's personal slices, and put the global model's in their place
    (a zero update there: never averaged). ``trainer.personal`` holds the global model's
    values here: the cohort trained from a copy, never from the worker's model."""
    store = getattr(trainer, "store", None)
    if store is None or not trainer.spec.layered:
        return outcomes
    global_pieces = [tensor.detach().reshape(-1) for tensor in trainer.personal]
    for outcome in outcomes:
        mine = [outcome.pieces[position] for position in trainer.personal_positions]
        store.put(outcome.client, torch.cat([piece.cpu() for piece in mine]))
        for position, piece in zip(trainer.personal_positions, global_pieces):
            outcome.pieces[position] = piece
    return outcomes


def from_personal_starts(cohort, clients: list[int], round_index: int, shared,
                         frozen=()) -> list:
    """``clients`` trained as one cohort from their rows of the store (Ditto's models,
    FedRep's heads), the shared parameters from the global model; ``frozen``: positions
    held. ``cohort``: a DittoCohort or FedRepCohort (its trainer, work, cohort trainer)."""
    from ...federated.cohorts.clients import train_cohort

    trainer = cohort.trainer
    trainer.load_global()
    feed, rows = trainer.feed.for_rows([shared.client_indices(k) for k in clients])
    return list(train_cohort(
        cohort.cohort_trainer, clients, round_index, cohort.work, rows, feed.batch,
        [p.detach() for p in trainer.params], trainer.client_lr(round_index),
        starts=personal_starts(trainer, clients, cohort.setup.device), frozen=frozen))


class DittoCohort:
    """A worker's stacked personal step of Ditto (see the module's docstring)."""

    def __init__(self, config, trainer, setup):
        from ...federated.cohorts.clients import ClientWork
        from ...federated.personal.local import loop_seed
        from .cohort_trainer import cohort_trainer

        self.trainer, self.setup = trainer, setup
        self.cohort_trainer = cohort_trainer(config, trainer.model, setup.data.task,
                                             setup.device, prox_mu=trainer.spec.strength)
        self.work = ClientWork(loop_seed(config.seed, "ditto"), config.batch_size,
                               config.fedavg.local_epochs)

    def train(self, clients: list[int], round_index: int, shared) -> None:
        """Train ``clients``' personal models together and store them (only once every
        one has trained: a cohort that raises leaves the store as it was, and its clients
        are trained again one at a time)."""
        trainer = self.trainer
        outcomes = from_personal_starts(self, clients, round_index, shared)
        for outcome in outcomes:
            trainer.store.put(outcome.client, torch.cat([p.cpu() for p in outcome.pieces]))


class FedRepCohort:
    """A worker's stacked head phase of FedRep (see the module's docstring)."""

    def __init__(self, config, trainer, setup):
        from ...federated.cohorts.clients import ClientWork
        from ...federated.personal.local import loop_seed
        from .cohort_trainer import cohort_trainer

        self.trainer, self.setup = trainer, setup
        self.cohort_trainer = cohort_trainer(config, trainer.model, setup.data.task,
                                             setup.device, prox_mu=0.0)
        self.work = ClientWork(loop_seed(config.seed, "head"), config.batch_size,
                               trainer.head_epochs)
        params = len(trainer.params)
        self.heads = [i for i in trainer.personal_positions if i < params]
        self.body = [i for i in range(params) if i not in self.heads]

    def train_heads(self, clients: list[int], round_index: int, shared) -> dict:
        """The clients' heads after the head phase, ``{position: [K, *shape]}``: the body
        cohort's starts."""
        trainer = self.trainer
        outcomes = from_personal_starts(self, clients, round_index, shared, frozen=self.body)
        return {i: torch.stack([o.pieces[i].view_as(trainer.params[i]) for o in outcomes])
                for i in self.heads}
