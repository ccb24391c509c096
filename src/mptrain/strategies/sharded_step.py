"""ddp between mptrain's own CPU processes with one shared copy of the parameters, each rank
stepping the optimizer on its chunk of them (ZeRO-1 over shared memory).

Under DDP every replica holds the same parameters after every step, so on one machine the
replicas can be one: the parameters and the optimizer state live once in shared memory,
every rank runs forward and backward on them with gradients of its own, and after the
gradients meet each rank averages only its chunk of them (``ShmGroup.mean_of_my_chunk``)
and steps the optimizer on that chunk of the shared parameters; a barrier, and everyone
reads the new parameters. Compared with averaging whole gradients into every replica and
stepping every replica (``ddp.SharedMemoryDDP``), no averaged gradient is copied back and
each rank's optimizer pass covers 1/world of the parameters: on a 5.9M-parameter MLP the
SGD-with-momentum pass was as long as the averaging (benchmarks/README, "Communication-bound
models"). The optimizers mptrain builds (SGD, Adam) are elementwise, so a chunk steps as its
parameters would.

Used where it pays and where nothing else depends on private replicas: float32 CPU
parameters, more than one rank, no convolution weights (a private replica of a conv net
trains in channels-last, which a shared copy cannot take: ``engine.channels_last``).
Checkpoints hold the usual per-parameter optimizer state, read from the shared buffers.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from ..engine.optim import build_optimizer, fresh_scalar_state, state_like_params
from ..data.shared import shared_zeros


def worth_sharding(model: nn.Module, config, workers: int) -> bool:
    """Whether ``model``'s ddp ranks should share one copy of its parameters: several ranks,
    float32 on the CPU (one dtype, one flat buffer), every parameter trained (a frozen one
    inside a chunk would be stepped with a zero gradient, and weight decay would move it), and
    no convolution weights (their private replicas train faster in channels-last than one
    shared copy in the usual layout)."""
    params = list(model.parameters())
    return (workers > 1 and config.device == "cpu" and bool(params)
            and all(p.dtype == torch.float32 and p.device.type == "cpu" and p.requires_grad
                    for p in params)
            and not any(p.dim() == 4 for p in params))


class SharedParameters:
    """A copy of the parent's model's parameters (and room for the optimizer state), laid end
    to end in shared memory, which the workers' replicas train.

    The parent's model stays apart: as with private replicas it receives rank 0's values
    once per epoch (``publish``), so a run stopped mid-epoch leaves it at the last epoch's
    end, and the parent's checks between epochs read a model nobody is writing."""

    def __init__(self, model: nn.Module, config):
        params = list(model.parameters())
        self.sizes = [p.numel() for p in params]
        numel = sum(self.sizes)
        self.flat = shared_zeros((numel,))
        # Adam's scalar ``step`` stays each rank's own: every rank steps equally often.
        self.states = {key: shared_zeros((numel,))
                       for key in state_like_params(config.optimizer, config.momentum)}
        with torch.no_grad():
            for param, view in zip(params, self.views(self.flat, params)):
                view.copy_(param)

    def views(self, flat: torch.Tensor, params) -> list[torch.Tensor]:
        return [piece.view_as(p) for piece, p in zip(flat.split(self.sizes), params)]


class ShardedStep:
    """This rank's optimizer: ``step()`` updates its chunk of the shared parameters with its
    chunk of the averaged gradients (the engine, ``ddp.ShardedStepDDP``, waits until every
    chunk is updated). Otherwise it behaves as the optimizer it wraps (``param_groups``,
    ``zero_grad``, state dicts over the model's parameters)."""

    def __init__(self, params: list[nn.Parameter], shared: SharedParameters, group, config):
        self.params, self.shared, self.group = params, shared, group
        low, high = group.chunk_bounds(shared.flat.numel(), shared.flat.element_size())
        self.chunk = shared.flat[low:high]
        self.inner = build_optimizer([self.chunk], config.optimizer, config.lr,
                                     config.momentum, config.weight_decay)
        state = {key: flat[low:high] for key, flat in shared.states.items()}
        state.update(fresh_scalar_state(config.optimizer))
        if state:
            self.inner.state[self.chunk] = state
        self._mean: torch.Tensor | None = None

    @property
    def param_groups(self):
        return self.inner.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        for param in self.params:
            if set_to_none:
                param.grad = None
            elif param.grad is not None:
                param.grad.zero_()

    def reduce_my_chunk(self, grads: list[torch.Tensor]) -> None:
        """After backward: this rank's chunk of the mean of every rank's ``grads``."""
        self._mean = self.group.mean_of_my_chunk(grads)

    def step(self) -> None:
        """Step this rank's chunk; the engine's ``after_step`` then waits for the others'
        (in the step profile's collective time, where it belongs)."""
        if self.chunk.numel():
            self.chunk.grad = self._mean
            self.inner.step()
            self.chunk.grad = None
        elif "step" in self.inner.state.get(self.chunk, {}):
            self.inner.state[self.chunk]["step"] += 1   # Adam's count, saved by every rank
        self._mean = None

    def state_dict(self) -> dict:
        group = {k: v for k, v in self.inner.param_groups[0].items() if k != "params"}
        group["params"] = list(range(len(self.params)))
        per_param = {key: self.shared.views(flat, self.params)
                     for key, flat in self.shared.states.items()}
        own = self.inner.state.get(self.chunk, {})
        state = {}
        for index in range(len(self.params)) if per_param else ():
            state[index] = {key: views[index].clone() for key, views in per_param.items()}
            if "step" in own:
                state[index]["step"] = own["step"].clone()
        return {"state": state, "param_groups": [group]}

    @torch.no_grad()
    def load_state_dict(self, saved: dict) -> None:
        """Rank 0 writes the shared state (everyone waits for it at the start line); every
        rank takes the hyper-parameters and its own step count."""
        saved_group = saved["param_groups"][0]
        for key, value in saved_group.items():
            if key != "params":
                self.inner.param_groups[0][key] = value
        states = saved.get("state", {})
        if not states:
            return
        first = next(iter(states.values()))
        own = self.inner.state.get(self.chunk)
        if own is not None and "step" in own and "step" in first:
            own["step"].copy_(torch.as_tensor(first["step"]))
        if self.group.rank != 0:
            return
        for key, flat in self.shared.states.items():
            for index, view in enumerate(self.shared.views(flat, self.params)):
                view.copy_(states[index][key])
