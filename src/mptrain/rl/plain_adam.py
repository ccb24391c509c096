"""a3c's and dqn's Adam: ``torch.optim.Adam`` as it steps parameters on a CPU, without
``torch.optim``.

Why: a run whose workers build no ``torch.optim`` optimizer never imports
``torch._dynamo`` (``launch.warmup`` says what that import costs and how the two kinds of
run pay or avoid it). PPO steps ``flat_adam``; a3c and dqn keep their parameters as they
are (a3c's Adam state is shared between processes, tensor by tensor), so they get this one.

The arithmetic is torch's, operation for operation: with parameters on a CPU and neither
``fused`` nor ``foreach`` asked for, ``torch.optim.Adam`` runs ``_single_tensor_adam``,
whose loop this is (``weight_decay`` 0, ``amsgrad``, ``maximize``, ``capturable`` and
``differentiable`` off, as a3c and dqn build it): the same in-place tensor operations in
the same order (in their foreach form: ``adam_update_``, which ``flat_adam`` steps with
too), the bias corrections in Python floats from the step read back after its increment. So a run steps bit for bit as it did with ``torch.optim``, and a
test compares the two. Its state is laid out as torch's (``state[param]``: ``step``,
``exp_avg``, ``exp_avg_sq``; ``state_dict`` in torch's format), so a3c's shared state
attaches to it as it did, and checkpoints written with either load into the other.
"""

from __future__ import annotations

from typing import Iterable

import torch


class PlainAdam:
    """Adam over ``params`` (a CPU's, a single float dtype or several): ``zero_grad``,
    ``step``, ``state``, ``param_groups``, ``state_dict``/``load_state_dict`` as
    ``torch.optim.Adam``'s."""

    def __init__(self, params: Iterable[torch.Tensor], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8):
        params = list(params)
        if not params:
            raise ValueError("optimizer got an empty parameter list")
        self.param_groups = [{"params": params, "lr": lr, "betas": tuple(betas), "eps": eps}]
        #: Per parameter, as torch's: ``step`` (a 0-d tensor), ``exp_avg``, ``exp_avg_sq``,
        #: made at its first step unless given (a3c attaches shared ones).
        self.state: dict[torch.Tensor, dict] = {}

    @property
    def params(self) -> list[torch.Tensor]:
        return self.param_groups[0]["params"]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad.detach_().requires_grad_(False)
                p.grad.zero_()

    @torch.no_grad()
    def step(self) -> None:
        group = self.param_groups[0]
        lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
        for param in self.params:
            if param.grad is None:       # torch.optim leaves such a parameter alone
                continue
            if param.grad.is_sparse:
                raise RuntimeError("Adam does not support sparse gradients")
            state = self.state.get(param)
            if not state:
                state = self.state[param] = _fresh_state(param)
            grad, exp_avg, exp_avg_sq = param.grad, state["exp_avg"], state["exp_avg_sq"]
            step_t = state["step"]
            step_t += 1
            if torch.is_complex(param):
                grad, exp_avg = torch.view_as_real(grad), torch.view_as_real(exp_avg)
                exp_avg_sq, param = torch.view_as_real(exp_avg_sq), torch.view_as_real(param)
            adam_update_([param], [grad], [exp_avg], [exp_avg_sq], step_t.item(), lr,
                         (beta1, beta2), eps)

    def state_dict(self) -> dict:
        """torch's layout: the state by parameter index, the group's settings."""
        index = {id(p): i for i, p in enumerate(self.params)}
        group = self.param_groups[0]
        return {"state": {index[id(p)]: dict(s) for p, s in self.state.items() if s},
                "param_groups": [{**_TORCH_GROUP, "lr": group["lr"],
                                  "betas": group["betas"], "eps": group["eps"],
                                  "params": list(range(len(self.params)))}]}

    def load_state_dict(self, saved: dict) -> None:
        """This optimizer's :meth:`state_dict`, or ``torch.optim.Adam``'s over the same
        parameters in the same order; its settings replace this one's, as torch's
        ``load_state_dict`` does. The moments take each parameter's dtype and device, the
        step stays as saved (torch's casts too)."""
        group = saved["param_groups"][0]
        if len(group["params"]) != len(self.params):
            raise ValueError("loaded state dict has a different number of parameters than "
                             "the optimizer's group")
        for key in ("lr", "betas", "eps"):
            self.param_groups[0][key] = tuple(group[key]) if key == "betas" else group[key]
        self.state = {}
        for position, param in zip(group["params"], self.params):
            values = saved["state"].get(position)
            if values is None:
                continue
            self.state[param] = {
                key: value if key == "step" else
                value.to(dtype=param.dtype, device=param.device)
                for key, value in values.items()}


#: The rest of ``torch.optim.Adam``'s group settings, as it builds them by default: written
#: so that a checkpoint of this optimizer loads into torch's as it stands.
_TORCH_GROUP = {"weight_decay": 0, "amsgrad": False, "maximize": False, "foreach": None,
                "capturable": False, "differentiable": False, "fused": None,
                "decoupled_weight_decay": False}


def _fresh_state(param: torch.Tensor) -> dict:
    """What torch's ``_init_group`` makes at a parameter's first step: a step count in the
    default float dtype's scalar type, zeroed moments shaped like the parameter."""
    dtype = torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32
    return {"step": torch.tensor(0.0, dtype=dtype),
            "exp_avg": torch.zeros_like(param, memory_format=torch.preserve_format),
            "exp_avg_sq": torch.zeros_like(param, memory_format=torch.preserve_format)}


def adam_update_(values: list[torch.Tensor], grads: list[torch.Tensor],
                 exp_avgs: list[torch.Tensor], exp_avg_sqs: list[torch.Tensor], step: float,
                 lr: float, betas: tuple[float, float], eps: float) -> None:
    """``_single_tensor_adam``'s update of ``values`` in place, at ``step`` (read after its
    increment), each of its operations applied to every tensor of the lists at once: a
    foreach operation computes each tensor as the single-tensor one does, so the bits are
    the loop's. The one Adam step of ``PlainAdam`` and of ``flat_adam`` without a fused
    kernel."""
    beta1, beta2 = betas
    step_size = lr / (1 - beta1 ** step)
    bias_correction2_sqrt = (1 - beta2 ** step) ** 0.5
    torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
    torch._foreach_mul_(exp_avg_sqs, beta2)
    torch._foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - beta2)
    denominators = torch._foreach_sqrt(exp_avg_sqs)
    torch._foreach_div_(denominators, bias_correction2_sqrt)
    torch._foreach_add_(denominators, eps)
    torch._foreach_addcdiv_(values, exp_avgs, denominators, -step_size)
