"""``ClientTrainer`` with a client's personal state (``--personalize`` fedper, fedrep, fedbn,
ditto): the trainer a fedavg worker uses when the run personalizes its training.

- FedPer, FedBN: a client starts from the global model with its personal layers put back
  from the store (a client never trained keeps the global model's), trains as FedAvg does,
  and keeps its personal layers in the store; its row sends the global model's values in
  those columns, so the server's update there is zero and they are never averaged (the
  server holds them whatever a row says: ``server_of``). FedProx pulls the personal layers
  to where the client started, its own values.
- FedRep: the same split, but first the head (the personal layers) trains alone for
  ``--personal-head-epochs`` with the body frozen, then the body for ``--local-epochs``
  with the head frozen (Collins et al. 2021, Algorithm 1).
- Ditto: before its FedAvg update -- which is FedAvg's, bit for bit -- the client trains its
  whole personal model ``v`` for ``--local-epochs`` from where it left it (the global model
  the first time), with the gradient of ``lambda/2 * ||v - w||^2`` pulling it towards the
  round's global model ``w`` (Li et al. 2021, Algorithm 1), and stores it.

Who writes the store, and why without a lock: a client's row is written only by the one
worker that trains it in the round, and read (to score it, or to checkpoint it) only after
the round's barriers (``worker``'s docstring).
"""

from __future__ import annotations

import torch

from ...federated.client import add_proximal_gradient_
from ...federated.personal.held import carry_global_, hold_columns
from ...federated.personal.layers import personal_layers
from ...federated.personal.local import personal_seed, run_local_steps
from ...federated.personal.spec import DEFAULT_HEAD_EPOCHS
from .clients import ClientTrainer
from .personal_setup import spec_of
from .settings import server_optimizer


def trainer_class(config) -> type:
    """The trainer a worker of this run uses."""
    spec = spec_of(config)
    return PersonalTrainer if spec is not None and spec.trains else ClientTrainer


def held_columns(trainer) -> list[tuple[int, int]]:
    """The global model's columns that no row may move: a layered method's personal tensors
    (Ditto's global model is FedAvg's, every column averaged)."""
    return list(trainer.columns) if isinstance(trainer, PersonalTrainer) and \
        trainer.spec.layered else []


def server_of(config, trainer):
    """The run's server optimizer, stepping every column but ``held_columns``."""
    return hold_columns(server_optimizer(config.fedavg), held_columns(trainer),
                        trainer.shared.global_flat)


class PersonalTrainer(ClientTrainer):
    """A worker's trainer that keeps each client's personal tensors in ``shared.personal``."""

    def __init__(self, config, shared, setup, client_controls):
        super().__init__(config, shared, setup, client_controls)
        self.spec = spec_of(config)
        self.store = shared.personal
        layers = personal_layers(self.model, self.spec)
        self.personal = [self.tensors[i] for i in layers.tensors]
        #: Their positions in ``floating_state`` (the stacked path's parameter positions).
        self.personal_positions = list(layers.tensors)
        sizes = [t.numel() for t in self.tensors]
        starts = torch.tensor([0] + sizes).cumsum(0).tolist()
        #: The global model's columns of each personal tensor.
        self.columns = [(starts[i], starts[i + 1]) for i in layers.tensors]
        head = set(layers.tensors)
        self.head = [p for i, p in enumerate(self.params) if i in head]
        self.body = [p for i, p in enumerate(self.params) if i not in head]
        self.head_epochs = config.fedavg.personal_head_epochs or DEFAULT_HEAD_EPOCHS
        # Ditto's anchor: the round's global parameters, where the client trains.
        self.anchor = self.global_views[:len(self.params)] if self.on_host else \
            [torch.empty_like(p) for p in self.params]
        self.scratch = [torch.empty_like(p) for p in self.params]
        # FedProx pulls a client towards where it started, which for its personal layers is
        # its own values, not the global model's (whose are never trained there).
        self.own_anchors = []
        if config.fedavg.prox_mu and self.spec.layered:
            self.prox_anchors = list(self.prox_anchors)
            for i in layers.tensors:
                if i < len(self.params):
                    self.prox_anchors[i] = torch.empty_like(self.params[i])
                    self.own_anchors.append((self.prox_anchors[i], self.params[i]))

    def unheard(self, client: int, round_index: int) -> bool:
        return False   # a dropped straggler still trains its personal layers

    def load_personal(self, client: int) -> bool:
        """Put ``client``'s personal tensors into the model (on top of the global model,
        loaded first); False when it has none yet (it keeps the global model's)."""
        if not self.store.has(client):
            return False
        row = self.store.row(client)
        with torch.no_grad():
            position = 0
            for tensor in self.personal:
                tensor.copy_(row[position:position + tensor.numel()].view_as(tensor))
                position += tensor.numel()
        return True

    def _keep_personal(self, client: int) -> None:
        self.store.put(client, torch.cat([t.detach().reshape(-1).cpu() for t in self.personal]))

    def train(self, client: int, round_index: int, relabel=None) -> tuple[int, int, float]:
        if self.spec.method == "ditto":
            self._ditto_step(client, round_index, relabel)
            self.load_global()
            return super().train(client, round_index, relabel)
        self.load_personal(client)
        with torch.no_grad():
            for anchor, param in self.own_anchors:
                anchor.copy_(param)
        if self.spec.method != "fedrep":
            result = super().train(client, round_index, relabel)
        else:
            self._train_only(self.head, lambda: self._local(client, round_index, "head",
                                                            self.head_epochs, relabel))
            result = self._train_only(self.body, lambda: super(PersonalTrainer, self).train(
                client, round_index, relabel))
        self._keep_personal(client)
        return result

    def flat_result(self, out: torch.Tensor | None = None) -> torch.Tensor:
        """The client's row: its model, but the global model's values in the personal
        columns (a zero update there: they are never averaged). Ditto's row is its FedAvg
        model as it is."""
        result = super().flat_result(out)
        if self.spec.layered:
            carry_global_(result, self.columns, self.shared.global_flat)
        return result

    # -- the personal loops ------------------------------------------------------------------
    def _train_only(self, trained: list, run):
        """``run()`` with every parameter but ``trained`` frozen (no gradient, so the
        optimizer skips it), and the optimizer fresh. A parameter the user froze stays
        frozen: only those this phase froze are thawed after it (the stacked path, which
        reads ``requires_grad`` once, trains the same ones)."""
        frozen = [p for p in self.params
                  if p.requires_grad and all(p is not t for t in trained)]
        for param in frozen:
            param.requires_grad_(False)
            param.grad = None
        try:
            return run()
        finally:
            for param in frozen:
                param.requires_grad_(True)

    def _local(self, client: int, round_index: int, kind: str, epochs: int, relabel,
               after_backward=None) -> None:
        c = self.config
        self.optimizer.state.clear()
        for group in self.optimizer.param_groups:
            group["lr"] = self.client_lr(round_index)
        self.model.train()
        feed = self.feed if relabel is None else _Relabelled(self.feed, relabel)
        run_local_steps(self.forward, self.optimizer, feed, self.shared.client_indices(client),
                        c.batch_size, self.setup.data.task,
                        personal_seed(c.seed, round_index, client, kind), self.setup.device,
                        epochs=epochs, after_backward=after_backward,
                        beat=self.setup.progress.beat, transform=self.transform)

    def _ditto_step(self, client: int, round_index: int, relabel) -> None:
        """Train ``client``'s personal model with the pull to the round's global model."""
        if not self.on_host:
            with torch.no_grad():
                for anchor, view in zip(self.anchor, self.global_views):
                    anchor.copy_(view)
        self.load_personal(client)
        strength = self.spec.strength
        pull = (lambda: add_proximal_gradient_(self.params, self.anchor, strength,
                                               self.scratch)) if strength else None
        self._local(client, round_index, "ditto", self.config.fedavg.local_epochs, relabel,
                    pull)
        self._keep_personal(client)


class _Relabelled:
    """A feed whose targets pass through a label-flipping attacker's ``relabel``."""

    def __init__(self, feed, relabel):
        self.feed, self.relabel = feed, relabel

    def batches(self, pairs):
        for key, indices, inputs, targets in self.feed.batches(pairs):
            yield key, indices, inputs, self.relabel(targets)
