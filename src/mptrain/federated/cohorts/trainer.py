"""A round's clients trained together: stacked copies of the model, one vectorized step for
all of them (``torch.func``: ``functional_call`` over parameters with a leading client
dimension, ``vmap`` of the gradient of each client's loss).

A client here is the client the one-at-a-time path trains -- the same batches in the same
order (``batches``), a fresh optimizer of its own (``optimizer``), FedProx's pull to where
it started, SCAFFOLD's correction ``c - c_i`` -- only its arithmetic runs batched
with the others', so its update equals the lone client's up to float rounding (the batched
kernels sum in another order). Its network's dropout masks are its own too: ``vmap`` draws
a separate mask per client (``randomness="different"``) from a generator seeded per cohort,
so a run is reproducible, though the masks are not those the lone client would draw.

Why not a loop of small steps: a client's step on a batch of 10 is a few tiny kernels, all
launch and dispatch overhead; stacked, the same work is a few large ones (a linear layer
becomes one batched matrix product, a convolution one grouped convolution).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, grad_and_value, vmap

from ...data.sources import CLASSIFICATION
from ...engine.precision import FULL
from ...engine.seeding import seed_global_generator
from .optimizer import ClientOptimizerSettings, StackedOptimizer
from .batches import CohortBatches
from .stackable import stackable


@dataclass
class CohortResult:
    """Each client's trained parameters (``params[i][k]``: parameter ``i`` of client ``k``)
    and what it did: real steps, samples, sum over its steps of loss x batch size, and
    whether its parameters are all finite (``finite_clients``)."""

    params: list[torch.Tensor]
    steps: list[int]
    samples: list[int]
    loss_sums: list[float]
    finite: list[bool]


def per_sample_loss(task: str, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The task's loss per sample (``engine.task.loss_fn`` before its mean)."""
    if task == CLASSIFICATION:
        return F.cross_entropy(output, target, reduction="none")
    losses = F.mse_loss(output, target.view_as(output).to(output.dtype), reduction="none")
    return losses.reshape(len(losses), -1).mean(1)


class CohortTrainer:
    """Trains cohorts of clients of ``model`` (its structure and buffers; its parameters
    are not touched). ``precision``: the run's (``engine.precision``); ``prox_mu``: the
    strength of a pull towards each client's start (FedProx's), or with ``pull_to_global``
    towards the global model even where a client starts elsewhere (Ditto's)."""

    def __init__(self, model: nn.Module, task: str, optimizer: ClientOptimizerSettings,
                 device: torch.device, precision: str = "32", prox_mu: float = 0.0,
                 pull_to_global: bool = False):
        self.model, self.task, self.optimizer = model, task, optimizer
        self.pull_to_global = pull_to_global
        #: What the cohort's step calls: ``model``, or its twin with each layer ``vmap``
        #: cannot batch rewritten (``stackable``); same parameters, same names.
        self.stacked_model = stackable(model)
        self.device, self.prox_mu = torch.device(device), prox_mu
        self.names = [name for name, _ in model.named_parameters()]
        #: Whether a lone client's optimizer steps each parameter (``find_trained``); None
        #: until a first batch shows it.
        self.trained: list[bool] | None = None
        self.autocast = precision != FULL
        self._gradients = vmap(grad_and_value(self._client_loss), in_dims=(0, None, 0, 0, 0),
                               randomness="different")

    # -- one client's loss, vmapped over the cohort ----------------------------------------
    def _client_loss(self, params: dict, buffers: dict, inputs: torch.Tensor,
                     targets: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """The weighted mean of the batch's per-sample losses: the plain mean over the real
        samples, padding (weight 0) left out."""
        if self.autocast:
            with torch.autocast(device_type=self.device.type, dtype=torch.bfloat16):
                output = functional_call(self.stacked_model, (params, buffers), (inputs,))
            output = output.float()
        else:
            output = functional_call(self.stacked_model, (params, buffers), (inputs,))
        losses = per_sample_loss(self.task, output, targets)
        return (losses * weight).sum() / weight.sum().clamp(min=1.0)

    def find_trained(self, inputs: torch.Tensor, targets: torch.Tensor) -> list[bool]:
        """Which parameters a lone client's optimizer steps, from one plain backward pass
        on the batch ``(inputs, targets)``: those that require a gradient and get one.

        ``torch.optim`` skips a parameter whose gradient is None -- a frozen one, or one
        the forward pass never uses -- so weight decay and momentum leave it as it is;
        a stacked gradient of it would be zeros, which weight decay would still move.
        The pass draws from the global generator (dropout): callers seed it afterwards
        or put it back."""
        if self.trained is None:
            params = list(self.model.parameters())
            wanted = [p for p in params if p.requires_grad]
            self.model.train()
            with torch.enable_grad():
                output = self.model(inputs.to(self.device))
                loss = per_sample_loss(self.task, output.float(),
                                       targets.to(self.device)).mean()
                grads = torch.autograd.grad(loss, wanted, allow_unused=True) \
                    if wanted and loss.requires_grad else [None] * len(wanted)
            got = {id(p) for p, g in zip(wanted, grads) if g is not None}
            self.trained = [id(p) in got for p in params]
        return self.trained

    def gradients(self, params: list[torch.Tensor], inputs: torch.Tensor,
                  targets: torch.Tensor, weight: torch.Tensor):
        """Every client's gradient and loss on its own batch: ``inputs[k]`` for client
        ``k``'s stacked parameters (all of them, stacked); the gradients are those of the
        trained parameters (``find_trained``) only, the others read as constants."""
        trained = self.find_trained(inputs[0], targets[0])
        named = {n: p for n, p, t in zip(self.names, params, trained) if t}
        constants = {n: p[0] for n, p, t in zip(self.names, params, trained) if not t}
        buffers = {**dict(self.model.named_buffers()), **constants}
        self.stacked_model.train()   # a twin's modules are its own (``stackable``)
        grads, losses = self._gradients(named, buffers, inputs, targets, weight)
        return [grads[name] for name in named], losses

    # -- a cohort's local training ---------------------------------------------------------
    def train(self, batches: CohortBatches, batch: Callable,
              global_params: Sequence[torch.Tensor],
              corrections: torch.Tensor | None = None, mask_seed: int = 0,
              lr: float | None = None, on_step: Callable[[int], None] | None = None,
              starts: dict[int, torch.Tensor] | None = None,
              frozen: Sequence[int] = ()) -> CohortResult:
        """Train ``batches.clients`` clients from the round's global model ``global_params``
        (one tensor per parameter, on the device).

        ``batch(indices)`` gives ``(inputs, targets)`` on the device for flat indices (a
        ``DeviceFeed``'s ``batch``); ``corrections`` (``[K, params]``): SCAFFOLD's ``c -
        c_i`` per client; ``lr``: this round's client learning rate (the settings' when
        None); ``on_step(samples)`` after every step (progress); ``starts``: each client's
        own start of some parameters, ``[K, *shape]`` by the parameter's position (FedPer's
        personal layers), instead of the global model's; ``frozen``: positions of parameters
        that keep their start (FedRep's head while its body trains).
        """
        K, B = batches.clients, batches.index.shape[2]
        if batches.length and self.trained is None:   # before the mask seed: its pass
            self.find_trained(*batch(batches.index[0, 0]))   # draws from the generator
        self.model.train()
        # Every client starts from ``global_params``: one copy, expanded over the cohort, until the
        # first step gives each its own (``StackedOptimizer``, which never writes it).
        # Parameters a lone client never steps stay that copy (``find_trained``).
        shared = [p.detach().to(self.device).unsqueeze(0).expand(K, *p.shape)
                  for p in global_params]
        for i, start in (starts or {}).items():   # never written either: steps go out of place
            shared[i] = start.to(self.device)
        kept = [i for i, t in enumerate(self.trained or [True] * len(shared)) if t]
        anchors = None
        if self.prox_mu:
            anchors = [global_params[i].detach().to(self.device) if self.pull_to_global
                       else shared[i] for i in kept]
        views = _correction_views(corrections, shared, self.device)
        if views is not None:
            views = [views[i] for i in kept]
        optimizer = StackedOptimizer(self.optimizer, [shared[i] for i in kept],
                                     shared_start=True)
        if lr is not None:
            optimizer.lr = lr
        weight = batches.weight.to(self.device)
        counts = batches.weight.sum(2)                               # [T, K]
        totals = counts.sum(1).to(torch.int64).tolist()
        steps = torch.tensor(batches.steps)
        loss_sums = torch.zeros(K, dtype=torch.float64, device=self.device)
        counts = counts.to(self.device)
        seed_global_generator(mask_seed, self.device)
        for t in range(batches.length):
            inputs, targets = batch(batches.index[t].reshape(-1))
            inputs = inputs.view(K, B, *inputs.shape[1:])
            targets = targets.view(K, B, *targets.shape[1:])
            grads, losses = self.gradients(_merged(shared, kept, optimizer.params), inputs,
                                           targets, weight[t])
            self._correct(grads, optimizer.params, anchors, views)
            active = None if min(batches.steps) > t else (steps > t).to(self.device)
            optimizer.step(grads, active)
            if frozen:
                _hold(optimizer.params, kept, frozen, shared)
            loss_sums += losses.detach() * counts[t]
            if on_step is not None:
                on_step(totals[t])
        # (shared if no client stepped)
        params = [p.contiguous() for p in _merged(shared, kept, optimizer.params)]
        return CohortResult(params, list(batches.steps), list(batches.samples),
                            loss_sums.tolist(), finite_clients(params))

    def _correct(self, grads, params, anchors, views) -> None:
        """The proximal gradient ``mu (w - anchor)``, then SCAFFOLD's ``c - c_i``:
        what the one-at-a-time path adds after backward, in the same order."""
        with torch.no_grad():
            if anchors is not None:
                for grad, param, anchor in zip(grads, params, anchors):
                    grad.add_(torch.sub(param, anchor), alpha=self.prox_mu)
            if views is not None:
                for grad, view in zip(grads, views):
                    grad.add_(view)


@torch.no_grad()
def finite_clients(params: Sequence[torch.Tensor]) -> list[bool]:
    """Whether each client's parameters (``params[i][k]``) are all finite: what
    ``federated.client.update_is_finite`` says of its row, for a fraction of the time.

    A sum is finite only if every term is (one NaN or infinity makes it NaN or infinite), so
    one reduction per stacked parameter clears every healthy client at once; only a client
    whose sum is not finite -- a NaN, an infinity, or huge finite values whose sum
    overflowed -- is looked at element by element. ``torch.isfinite(row).all()`` on every
    row instead cost 61 ms a round for 50 clients of the 2NN on this project's 2-core CPU,
    the sums 7.4 ms (issue 39's pfl-shape round is ~150 ms)."""
    clients = params[0].shape[0]
    cleared = torch.ones(clients, dtype=torch.bool, device=params[0].device)
    for p in params:
        cleared &= torch.isfinite(p.reshape(clients, -1).sum(1))
    finite = cleared.tolist()
    for k, ok in enumerate(finite):
        if not ok:
            finite[k] = all(bool(torch.isfinite(p[k]).all()) for p in params)
    return finite


@torch.no_grad()
def _hold(params: list[torch.Tensor], kept: list[int], frozen: Sequence[int],
          starts: list[torch.Tensor]) -> None:
    """Put the ``frozen`` parameters back to their starts after a step: they are stepped
    with the others (a frozen parameter of each client's own cannot be a cohort's
    constant), and their step undone -- as a parameter without a gradient that a lone
    client's optimizer skips."""
    for j, i in enumerate(kept):
        if i in frozen:
            params[j].copy_(starts[i])


def _merged(every: list[torch.Tensor], kept: list[int],
            trained: list[torch.Tensor]) -> list[torch.Tensor]:
    """``every`` with its entries at ``kept`` replaced by ``trained``, in order."""
    merged = list(every)
    for i, tensor in zip(kept, trained):
        merged[i] = tensor
    return merged


def _correction_views(corrections, params, device) -> list[torch.Tensor] | None:
    """``[K, params]`` split into one ``[K, *shape]`` view per parameter."""
    if corrections is None:
        return None
    corrections = corrections.to(device)
    sizes = [p[0].numel() for p in params]
    return [piece.reshape(p.shape) for piece, p in
            zip(corrections.split(sizes, dim=1), params)]


def stacked_rows(result: CohortResult, model: nn.Module) -> torch.Tensor:
    """``[K, numel]``: each client's model flat, parameters then floating buffers (as
    ``strategies.model_state.floating_state`` orders them). Buffers are the model's:
    training in a cohort never changes them (``check`` refuses models that would)."""
    K = len(result.steps)
    pieces = [p.detach().reshape(K, -1) for p in result.params]
    pieces += [b.detach().reshape(1, -1).to(pieces[0].device).expand(K, -1)
               for b in model.buffers() if b.is_floating_point()]
    return torch.cat(pieces, dim=1)
