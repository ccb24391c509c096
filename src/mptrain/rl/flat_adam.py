"""PPO's learner optimizer: Adam over a network whose parameters and gradients each lie in
one flat tensor.

Why not ``torch.optim.Adam``: building any ``torch.optim`` optimizer imports
``torch._dynamo`` (torch 2.x wraps the optimizers' methods in ``torch._disable_dynamo``),
about 0.7 s of a 2-core machine that every run paid before its first step (the parent
imported it before forking its workers); and with PPO's small networks the per-tensor
bookkeeping of a step -- ``zero_grad``, ``clip_grad_norm_`` over a list, the optimizer's
hooks and wrappers -- was a large part of a minibatch step. Here zeroing is one operation
on the flat gradient, clipping three and the step two, with no per-tensor Python loop.

The arithmetic is torch's, operation for operation: the norm of the gradients is
``clip_grad_norm_``'s (per-tensor norms, then their norm), the scaling its
``_foreach_mul_``, and the step the kernel ``torch.optim.Adam(fused=True)`` runs
(``torch._fused_adam_``) on the same per-parameter tensors (views of the flat ones). So a
run steps exactly as it did with ``torch.optim``: the same seed gives the same run as
before this class, and a test compares the two bit for bit.

A torch without that kernel for the parameters' device (CPU before torch 2.4, the oldest
pyproject.toml accepts being 2.2) gets the step ``torch.optim.Adam`` takes there instead:
its per-tensor loop (``_single_tensor_adam``), the same operations on the same views, in
``_foreach_`` form (on a CPU each runs that loop's operation tensor by tensor). A test
compares it with ``torch.optim.Adam`` bit for bit under the current torch too, by asking for
it (``fused=False``).
"""

from __future__ import annotations

import functools

import torch
import torch.nn as nn

from ..errors import UserError
from .plain_adam import adam_update_


class FlatAdam:
    """Adam for ``net``, whose parameters it moves into one flat tensor (``flat``; each
    parameter becomes a view of its slice) and whose gradients it points at slices of
    another (``grad``): backward passes accumulate there, in place (zeroed before, so the
    sum is the gradient itself), and no gradient is ever allocated. ``net`` must be this
    optimizer's own: nothing else may hold its parameters' old storage. ``fused``: whether
    to step with torch's fused kernel; None (the default) where this torch has it."""

    def __init__(self, net: nn.Module, lr: float, eps: float = 1e-8,
                 betas: tuple[float, float] = (0.9, 0.999), fused: bool | None = None):
        self.params = list(net.parameters())
        dtypes = {p.dtype for p in self.params}
        if len(dtypes) > 1 or any(not p.is_floating_point() for p in self.params):
            raise UserError(f"the network's parameters are of several dtypes or not floating "
                            f"point ({', '.join(sorted(map(str, dtypes)))}); ppo's learner "
                            "steps them as one tensor: give a network of one float dtype")
        self.flat = torch.cat([p.detach().reshape(-1) for p in self.params])
        self.grad = torch.zeros_like(self.flat)
        self.exp_avg = torch.zeros_like(self.flat)
        self.exp_avg_sq = torch.zeros_like(self.flat)
        with torch.no_grad():
            for p, (value, grad) in zip(self.params, zip(self.views(self.flat),
                                                         self.views(self.grad))):
                p.data = value
                p.grad = grad
        self._values, self._grads = self.views(self.flat), self.views(self.grad)
        self._moments = self.views(self.exp_avg), self.views(self.exp_avg_sq)
        self.step_count = torch.zeros((), dtype=torch.float32)   # as torch.optim keeps it
        self.lr, self.eps, self.betas = lr, eps, betas
        self.fused = fused_adam_runs(self.flat.device, self.flat.dtype) if fused is None \
            else fused

    def views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """``flat`` cut into tensors of the parameters' shapes (views)."""
        out, offset = [], 0
        for p in self.params:
            out.append(flat[offset:offset + p.numel()].view(p.shape))
            offset += p.numel()
        return out

    @property
    def steps(self) -> int:
        return int(self.step_count)

    def zero_grad(self) -> None:
        self.grad.zero_()

    @torch.no_grad()
    def clip_grad_norm_(self, max_norm: float) -> torch.Tensor:
        """Scale the gradients to a total 2-norm of at most ``max_norm``, as
        ``torch.nn.utils.clip_grad_norm_`` does; the norm before."""
        norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(self._grads, 2.0)),
                                        2.0)
        torch._foreach_mul_(self._grads, torch.clamp(max_norm / (norm + 1e-6), max=1.0))
        return norm

    @torch.no_grad()
    def step(self) -> None:
        torch._foreach_add_([self.step_count], 1)
        exp_avgs, exp_avg_sqs = self._moments
        if self.fused:
            _fused_step(self._values, self._grads, exp_avgs, exp_avg_sqs, self.step_count,
                        self.lr, self.betas, self.eps)
            return
        adam_update_(self._values, self._grads, exp_avgs, exp_avg_sqs, self.step_count.item(),
                     self.lr, self.betas, self.eps)   # torch.optim.Adam's loop over the views

    def state_dict(self) -> dict:
        return {"steps": self.steps, "exp_avg": self.exp_avg.clone(),
                "exp_avg_sq": self.exp_avg_sq.clone()}

    def load_state_dict(self, state: dict) -> None:
        """This optimizer's :meth:`state_dict`, or ``torch.optim.Adam``'s over the same
        parameters in the same order (checkpoints written before this class)."""
        if "state" in state:   # torch.optim's: per parameter index, its moments and step
            moments = [state["state"].get(i) for i in range(len(self.params))]
            if any(m is None for m in moments):   # never stepped: nothing to carry over
                state = {"steps": 0, "exp_avg": torch.zeros_like(self.exp_avg),
                         "exp_avg_sq": torch.zeros_like(self.exp_avg_sq)}
            else:
                state = {"steps": int(moments[0]["step"]),
                         "exp_avg": torch.cat([m["exp_avg"].reshape(-1) for m in moments]),
                         "exp_avg_sq": torch.cat([m["exp_avg_sq"].reshape(-1)
                                                  for m in moments])}
        self.step_count.fill_(int(state["steps"]))
        self.exp_avg.copy_(state["exp_avg"])
        self.exp_avg_sq.copy_(state["exp_avg_sq"])


def _fused_step(values, grads, exp_avgs, exp_avg_sqs, step_count: torch.Tensor, lr: float,
                betas: tuple[float, float], eps: float) -> None:
    """``torch.optim.Adam(fused=True)``'s step: one kernel over all the tensors."""
    torch._fused_adam_(values, grads, exp_avgs, exp_avg_sqs, [], [step_count] * len(values),
                       amsgrad=False, lr=lr, beta1=betas[0], beta2=betas[1],
                       weight_decay=0.0, eps=eps, maximize=False)


@functools.lru_cache(maxsize=None)
def fused_adam_runs(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether this torch has the fused Adam kernel for tensors of ``dtype`` on ``device``
    (a CPU's since torch 2.4): asked by running it once on a tensor of one element, the
    way :meth:`FlatAdam.step` calls it (a version number would not tell a build without
    it)."""
    one = torch.zeros(1, device=device, dtype=dtype)
    try:
        _fused_step([one], [one.clone()], [one.clone()], [one.clone()],
                    torch.ones((), dtype=torch.float32), lr=0.0, betas=(0.9, 0.999), eps=1e-8)
    except (AttributeError, NotImplementedError, RuntimeError):
        return False
    return True
