"""Built-in networks for flat observations and discrete actions, or the user's own."""

from __future__ import annotations

import torch
import torch.nn as nn

from ..errors import UserError
from ..imports import load_object
from .envs import EnvShape


class ActorCritic(nn.Module):
    """A shared trunk with a policy head (action logits) and a value head (A3C)."""

    def __init__(self, obs_dim: int, n_actions: int, hidden: int = 128):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(obs_dim, hidden), nn.Tanh(),
                                   nn.Linear(hidden, hidden), nn.Tanh())
        self.policy = nn.Linear(hidden, n_actions)
        self.value = nn.Linear(hidden, 1)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.trunk(obs)
        return self.policy(features), self.value(features).squeeze(-1)


class QNetwork(nn.Module):
    """The seed's DQN network: two hidden layers, one Q-value per action."""

    def __init__(self, obs_dim: int, n_actions: int, hidden: int = 128):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(obs_dim, hidden), nn.ReLU(),
                                    nn.Linear(hidden, hidden), nn.ReLU(),
                                    nn.Linear(hidden, n_actions))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.layers(obs)


def build_network(algo: str, shape: EnvShape, hidden: int, spec: str | None = None):
    """The network for ``algo``; ``spec`` (``module:make``) is called as
    ``make(obs_dim, n_actions)`` and must return what the algorithm expects: for a3c a module
    returning ``(logits, value)``, for dqn one returning Q-values."""
    if spec is not None:
        model = load_object(spec, "--net")(shape.obs_dim, shape.n_actions)
        if not isinstance(model, nn.Module):
            raise UserError(f"--net {spec!r} returned {type(model).__name__}, not an "
                            "nn.Module")
    elif algo == "a3c":
        model = ActorCritic(shape.obs_dim, shape.n_actions, hidden)
    else:
        model = QNetwork(shape.obs_dim, shape.n_actions, hidden)
    _check_outputs(model, algo, shape, spec or "the built-in network")
    return model


def _check_outputs(model, algo, shape, name) -> None:
    with torch.no_grad():
        out = model(torch.zeros(2, shape.obs_dim))
    if algo == "a3c":
        ok = isinstance(out, tuple) and len(out) == 2 and \
            tuple(out[0].shape) == (2, shape.n_actions) and out[1].numel() == 2
        need = f"(logits [batch, {shape.n_actions}], value [batch])"
    else:
        ok = isinstance(out, torch.Tensor) and tuple(out.shape) == (2, shape.n_actions)
        need = f"Q-values [batch, {shape.n_actions}]"
    if not ok:
        raise UserError(f"--net: {name} must return {need} for --algo {algo}")
