"""The client optimizers of a cohort: one update for every client's stacked parameters at
once, each client with its own state, in the arithmetic of ``torch.optim`` (SGD with
momentum and weight decay, Adam), so that a client trained in a cohort follows the steps it
would take alone up to float rounding.

Every tensor here has the clients as its leading dimension. Clients stop at different
steps (fewer samples, stragglers); on a step where some are done, their parameters and
state are put back as they were, so padded steps change nothing.

A cohort starts from one model: until its first step the stacked parameters are that model
expanded over the clients (a view, no copy), and the first step writes each client's own
parameters out of place. Copying the model once per client first and updating the copies
in place costs two more passes over the whole cohort's parameters (40 MB for 50 copies of
the McMahan 2NN); the shared start also lets the first step's forward pass read one model
instead of one per client. Both ways compute the same numbers: an update is ``p + a * u``
elementwise, in place or not.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ClientOptimizerSettings:
    """What ``engine.optim.build_optimizer`` takes: ``momentum`` is Adam's beta1 when set
    (0.9 when not), as there."""

    name: str
    lr: float
    momentum: float = 0.0
    weight_decay: float = 0.0

    def __post_init__(self):
        if self.name not in ("sgd", "adam"):
            raise ValueError(f"unknown optimizer {self.name!r}")

    def state_tensors(self) -> int:
        """Tensors of state per parameter (for memory estimates)."""
        if self.name == "adam":
            return 2
        return 1 if self.momentum else 0


class StackedOptimizer:
    """A fresh optimizer for a cohort of clients (as every client starts one alone).

    ``params``: the stacked parameters; with ``shared_start``, the clients' common start
    expanded over them (views that are never written: the first step replaces them by each
    client's own tensors, so read ``params`` after a step rather than keeping the list)."""

    ADAM_BETA2, ADAM_EPS = 0.999, 1e-8

    def __init__(self, settings: ClientOptimizerSettings, params: list[torch.Tensor],
                 shared_start: bool = False):
        self.settings = settings
        self.params = params
        self.shared_start = shared_start
        self.lr = settings.lr
        self.step_count = 0
        self.buffers: list[torch.Tensor] | None = None     # SGD momentum
        self.exp_avg = self.exp_avg_sq = None               # Adam

    @torch.no_grad()
    def step(self, grads: list[torch.Tensor], active: torch.Tensor | None = None) -> None:
        """One step of every client; ``active`` (bool ``[K]``), when given, names the
        clients that take it: the others keep their parameters and state bitwise."""
        kept = None
        if active is not None:
            # A shared start is never written (updates go out of place): no copy to keep.
            kept = self.params if self.shared_start else [t.clone() for t in self._state()]
        if self.settings.name == "sgd":
            self._sgd(grads)
        else:
            self._adam(grads)
        if kept is not None:
            if self.shared_start:
                self.params = [torch.where(_mask(active, new), new, old)
                               for new, old in zip(self.params, kept)]
            else:
                for tensor, old in zip(self._state(), kept):
                    tensor.copy_(torch.where(_mask(active, tensor), tensor, old))
        self.shared_start = False

    def _state(self) -> list[torch.Tensor]:
        state = list(self.params)
        for extra in (self.buffers, self.exp_avg, self.exp_avg_sq):
            if extra is not None:
                state += extra
        return state

    def _sgd(self, grads) -> None:
        s = self.settings
        if s.weight_decay:
            grads = torch._foreach_add(grads, self.params, alpha=s.weight_decay)
        if s.momentum:
            if self.buffers is None:   # torch.optim.SGD: the first buffer is the gradient
                self.buffers = [g.clone() for g in grads]
            else:
                torch._foreach_mul_(self.buffers, s.momentum)
                torch._foreach_add_(self.buffers, grads)
            grads = self.buffers
        self._update(torch._foreach_add, torch._foreach_add_, grads, alpha=-self.lr)

    def _update(self, out_of_place, in_place, *args, **kwargs) -> None:
        """``params <- op(params, *args)``: in place, or out of place (each client's own
        tensors) while the parameters are still the cohort's shared start."""
        if self.shared_start:
            self.params = out_of_place(self.params, *args, **kwargs)
        else:
            in_place(self.params, *args, **kwargs)

    def _adam(self, grads) -> None:
        s = self.settings
        beta1, beta2 = (s.momentum if s.momentum else 0.9), self.ADAM_BETA2
        if self.exp_avg is None:
            self.exp_avg = [p.new_zeros(p.shape) for p in self.params]
            self.exp_avg_sq = [p.new_zeros(p.shape) for p in self.params]
        self.step_count += 1
        if s.weight_decay:
            grads = torch._foreach_add(grads, self.params, alpha=s.weight_decay)
        torch._foreach_lerp_(self.exp_avg, grads, 1 - beta1)
        torch._foreach_mul_(self.exp_avg_sq, beta2)
        torch._foreach_addcmul_(self.exp_avg_sq, grads, grads, value=1 - beta2)
        step_size = self.lr / (1 - beta1 ** self.step_count)
        correction2_sqrt = (1 - beta2 ** self.step_count) ** 0.5
        denom = torch._foreach_sqrt(self.exp_avg_sq)
        torch._foreach_div_(denom, correction2_sqrt)
        torch._foreach_add_(denom, self.ADAM_EPS)
        self._update(torch._foreach_addcdiv, torch._foreach_addcdiv_, self.exp_avg, denom,
                     value=-step_size)


def _mask(active: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``active`` (``[K]``) shaped to broadcast over ``like`` (``[K, ...]``)."""
    return active.view(-1, *([1] * (like.dim() - 1)))
