"""PPO's learner optimizer: Adam over a network whose parameters and gradients each lie in
one flat tensor.

Why not ``torch.optim.Adam``: building any ``torch.optim`` optimizer imports
``torch._dynamo`` (torch 2.x wraps the optimizers' methods in ``torch._disable_dynamo``),
about 0.7 s of a 2-core machine that every run paid before its first step (the parent
imported it before forking its workers); and with PPO's small networks the per-tensor
bookkeeping of a step -- ``zero_grad``, ``clip_grad_norm_`` over a list, the optimizer's
hooks and wrappers -- was a large part of a minibatch step. Laid end to end, zeroing,
clipping and the Adam step are a handful of operations on two tensors.

The arithmetic is torch's Adam (``torch.optim.Adam``, no weight decay, no amsgrad) and
``clip_grad_norm_``'s; a test compares the two on the same gradients.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn


class FlatAdam:
    """Adam for ``net``, whose parameters it moves into one flat tensor (``flat``; each
    parameter becomes a view of its slice) and whose gradients it points at slices of
    another (``grad``): backward passes accumulate there, in place, so no gradient is ever
    allocated or gathered. ``net`` must be this optimizer's own: nothing else may hold its
    parameters' old storage."""

    def __init__(self, net: nn.Module, lr: float, eps: float = 1e-8,
                 betas: tuple[float, float] = (0.9, 0.999)):
        self.params = list(net.parameters())
        numel = sum(p.numel() for p in self.params)
        dtype = self.params[0].dtype if self.params else torch.float32
        self.flat = torch.empty(numel, dtype=dtype)
        self.grad = torch.zeros(numel, dtype=dtype)
        offset = 0
        with torch.no_grad():
            for p in self.params:
                size = p.numel()
                self.flat[offset:offset + size].copy_(p.reshape(-1))
                p.data = self.flat[offset:offset + size].view_as(p)
                p.grad = self.grad[offset:offset + size].view_as(p)
                offset += size
        self.lr, self.eps, self.betas = lr, eps, betas
        self.steps = 0
        self.exp_avg = torch.zeros_like(self.flat)
        self.exp_avg_sq = torch.zeros_like(self.flat)

    def zero_grad(self) -> None:
        self.grad.zero_()

    @torch.no_grad()
    def clip_grad_norm_(self, max_norm: float) -> torch.Tensor:
        """Scale the gradient to a 2-norm of at most ``max_norm``, as
        ``torch.nn.utils.clip_grad_norm_`` does; the norm before."""
        norm = self.grad.norm()
        self.grad.mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))
        return norm

    @torch.no_grad()
    def step(self) -> None:
        beta1, beta2 = self.betas
        self.steps += 1
        self.exp_avg.lerp_(self.grad, 1 - beta1)
        self.exp_avg_sq.mul_(beta2).addcmul_(self.grad, self.grad, value=1 - beta2)
        step_size = self.lr / (1 - beta1 ** self.steps)
        denom = (self.exp_avg_sq.sqrt() / math.sqrt(1 - beta2 ** self.steps)).add_(self.eps)
        self.flat.addcdiv_(self.exp_avg, denom, value=-step_size)

    def state_dict(self) -> dict:
        return {"steps": self.steps, "exp_avg": self.exp_avg.clone(),
                "exp_avg_sq": self.exp_avg_sq.clone()}

    def load_state_dict(self, state: dict) -> None:
        """This optimizer's :meth:`state_dict`, or ``torch.optim.Adam``'s over the same
        parameters in the same order (checkpoints written before this class)."""
        if "state" in state:   # torch.optim's: per parameter index, its moments and step
            moments = [state["state"].get(i) for i in range(len(self.params))]
            if any(m is None for m in moments):   # never stepped: nothing to carry over
                self.steps = 0
                self.exp_avg.zero_(), self.exp_avg_sq.zero_()
                return
            state = {"steps": int(moments[0]["step"]),
                     "exp_avg": torch.cat([m["exp_avg"].reshape(-1) for m in moments]),
                     "exp_avg_sq": torch.cat([m["exp_avg_sq"].reshape(-1) for m in moments])}
        self.steps = int(state["steps"])
        self.exp_avg.copy_(state["exp_avg"])
        self.exp_avg_sq.copy_(state["exp_avg_sq"])
