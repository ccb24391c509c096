"""Server optimizers (Reddi et al. 2021, "Adaptive Federated Optimization", Algorithm 2).

The clients' average ``avg`` gives the pseudo-gradient ``g = x - avg`` (minus the mean
client update), which a server optimizer applies to the global model ``x``:

- ``ServerSGD``: ``x <- x - lr * g``, with momentum ``v <- mu * v + g`` (FedAvgM, Hsu et
  al. 2019); plain FedAvg (lr 1, no momentum) takes the average itself.
- ``ServerAdagrad``: ``m <- b1 m + (1 - b1) g``, ``v <- v + g^2``,
- ``ServerAdam``: ``v <- b2 v + (1 - b2) g^2``,
- ``ServerYogi``: ``v <- v - (1 - b2) g^2 sign(v - g^2)``,

  each then ``x <- x - lr * m / (sqrt(v) + tau)`` (no bias correction, as in the paper;
  ``v`` starts at ``tau^2``, the paper's ``v_{-1} >= tau^2``).

Every step is elementwise, so each worker applies it to its own slice of the flat
parameter vector and of the state (which lives in shared memory); the state is a dict of
flat tensors, which is also what a checkpoint holds.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import torch

from ..errors import UserError
from ..errors import setting_name as named   # as the caller spelled the setting
from .choices import SERVER_OPTIMIZERS

DEFAULT_BETAS = (0.9, 0.99)
DEFAULT_TAU = 1e-3
#: The server learning rate when none is given: FedAvg's 1 for sgd; for the adaptive
#: optimizers the middle of the grid Reddi et al. search (their best values lie in
#: 10^-2.5 .. 10^-0.5 on most tasks).
DEFAULT_LR = {"sgd": 1.0, "adam": 0.01, "yogi": 0.01, "adagrad": 0.1}


class ServerOptimizer(ABC):
    """An elementwise server step over flat tensors; state in ``init_state``'s tensors."""

    name: ClassVar[str] = "base"

    def __init__(self, lr: float):
        self.lr = lr

    def init_state(self, numel: int) -> dict[str, torch.Tensor]:
        """The optimizer's state for ``numel`` parameters (flat tensors, none for plain
        FedAvg)."""
        return {}

    @abstractmethod
    def step_(self, params: torch.Tensor, average: torch.Tensor,
              state: dict[str, torch.Tensor]) -> None:
        """Move ``params`` given the clients' ``average``; ``state`` holds views of the
        same slice of each state tensor."""

    @abstractmethod
    def describe(self) -> str:
        """The optimizer and its settings, for the banner."""


class ServerSGD(ServerOptimizer):
    name = "sgd"

    def __init__(self, lr: float = 1.0, momentum: float = 0.0):
        super().__init__(lr)
        self.momentum = momentum

    def init_state(self, numel):
        return {"velocity": torch.zeros(numel)} if self.momentum else {}

    @torch.no_grad()
    def step_(self, params, average, state):
        if self.lr == 1.0 and not self.momentum:
            params.copy_(average)   # plain FedAvg: bitwise the average
            return
        step = params - average
        if self.momentum:
            velocity = state["velocity"]
            velocity.mul_(self.momentum).add_(step)
            step = velocity
        params.sub_(step, alpha=self.lr)

    def describe(self):
        if self.lr == 1.0 and not self.momentum:
            return "server: the clients' average"
        return f"server sgd lr {self.lr:g} momentum {self.momentum:g}"


class _AdaptiveServerOptimizer(ServerOptimizer):
    def __init__(self, lr: float, betas: tuple[float, float] = DEFAULT_BETAS,
                 tau: float = DEFAULT_TAU):
        super().__init__(lr)
        self.beta1, self.beta2 = betas
        self.tau = tau

    def init_state(self, numel):
        return {"m": torch.zeros(numel), "v": torch.full((numel,), self.tau ** 2)}

    @abstractmethod
    def _second_moment_(self, v: torch.Tensor, squared: torch.Tensor) -> None:
        """Update the second moment ``v`` in place from the squared average (the one line
        in which Adam, Yogi and Adagrad differ)."""

    @torch.no_grad()
    def step_(self, params, average, state):
        m, v = state["m"], state["v"]
        gradient = params - average
        m.mul_(self.beta1).add_(gradient, alpha=1 - self.beta1)
        self._second_moment_(v, gradient.square_())
        params.addcdiv_(m, v.sqrt().add_(self.tau), value=-self.lr)

    def describe(self):
        return (f"server {self.name} lr {self.lr:g} betas {self.beta1:g},{self.beta2:g} "
                f"tau {self.tau:g}")


class ServerAdagrad(_AdaptiveServerOptimizer):
    name = "adagrad"

    def _second_moment_(self, v, squared):
        v.add_(squared)

    def describe(self):
        return f"server adagrad lr {self.lr:g} beta1 {self.beta1:g} tau {self.tau:g}"


class ServerAdam(_AdaptiveServerOptimizer):
    name = "adam"

    def _second_moment_(self, v, squared):
        v.mul_(self.beta2).add_(squared, alpha=1 - self.beta2)


class ServerYogi(_AdaptiveServerOptimizer):
    name = "yogi"

    def _second_moment_(self, v, squared):
        # v - (1 - b2) * g^2 * sign(v - g^2)
        v.sub_(torch.sign(v - squared).mul_(squared), alpha=1 - self.beta2)


_CLASSES = {cls.name: cls for cls in (ServerSGD, ServerAdam, ServerYogi, ServerAdagrad)}


def build_server_optimizer(name: str = "sgd", lr: float | None = None,
                           momentum: float = 0.0, betas: tuple[float, float] | None = None,
                           tau: float | None = None) -> ServerOptimizer:
    """The server optimizer called ``name``; ``None`` leaves a setting at its default."""
    if name not in _CLASSES:
        raise UserError(f"unknown {named('server_optimizer')} {name!r}; choose one of: "
                        f"{', '.join(SERVER_OPTIMIZERS)}")
    lr = DEFAULT_LR[name] if lr is None else lr
    if name == "sgd":
        return ServerSGD(lr, momentum)
    return _CLASSES[name](lr, tuple(betas or DEFAULT_BETAS),
                          DEFAULT_TAU if tau is None else tau)
