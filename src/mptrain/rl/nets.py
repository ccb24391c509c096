"""Built-in networks for flat observations and discrete actions, or the user's own."""

from __future__ import annotations

from contextlib import nullcontext

import torch
import torch.nn as nn

from ..errors import UserError, raised_by_users_code
from ..errors import setting_name as named   # as the caller spelled the setting
from ..imports import call_factory
from ..strategies.registry import strategy_class
from .config import ALGO_SETTINGS
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

    @staticmethod
    def outputs_fit(out, batch: int, n_actions: int) -> bool:
        # A value head of (N, 1), the usual nn.Linear(hidden, 1), is as good as (N,):
        # the algorithms read values through ``flat_values``.
        return isinstance(out, tuple) and len(out) == 2 \
            and all(isinstance(part, torch.Tensor) for part in out) \
            and tuple(out[0].shape) == (batch, n_actions) \
            and tuple(out[1].shape) in ((batch,), (batch, 1))

    @staticmethod
    def outputs_wanted(n_actions: int) -> str:
        return f"(logits [batch, {n_actions}], value [batch] or [batch, 1])"


class SeparateActorCritic(ActorCritic):
    """PPO's network: a policy and a value function with a trunk each, orthogonally
    initialised -- the hidden layers with gain sqrt(2), the policy head with 0.01 (a nearly
    uniform first policy), the value head with 1 -- as CleanRL's ``ppo.py`` and
    stable-baselines3's ``MlpPolicy`` build it. A shared trunk lets the value loss, whose
    scale grows with the returns, push the policy's features around."""

    def __init__(self, obs_dim: int, n_actions: int, hidden: int = 64):
        nn.Module.__init__(self)
        self.policy_trunk = _tanh_trunk(obs_dim, hidden)
        self.value_trunk = _tanh_trunk(obs_dim, hidden)
        self.policy = _orthogonal(nn.Linear(hidden, n_actions), 0.01)
        self.value = _orthogonal(nn.Linear(hidden, 1), 1.0)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return (self.policy(self.policy_trunk(obs)),
                self.value(self.value_trunk(obs)).squeeze(-1))


def _tanh_trunk(obs_dim: int, hidden: int) -> nn.Sequential:
    gain = 2 ** 0.5
    return nn.Sequential(_orthogonal(nn.Linear(obs_dim, hidden), gain), nn.Tanh(),
                         _orthogonal(nn.Linear(hidden, hidden), gain), nn.Tanh())


def _orthogonal(layer: nn.Linear, gain: float) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def flat_values(values: torch.Tensor) -> torch.Tensor:
    """A value head's output as one value per observation, (N,), from (N,) or (N, 1)."""
    return values.reshape(values.shape[0]) if values.dim() == 2 else values


def shapes_of(out) -> str:
    """What a network returned, by shape, for an error message."""
    if isinstance(out, torch.Tensor):
        return f"a tensor of shape {tuple(out.shape)}"
    if isinstance(out, (tuple, list)):
        parts = [str(tuple(part.shape)) if isinstance(part, torch.Tensor)
                 else type(part).__name__ for part in out]
        return f"({', '.join(parts)})"
    return type(out).__name__


class QNetwork(nn.Module):
    """The seed's DQN network: two hidden layers, one Q-value per action."""

    def __init__(self, obs_dim: int, n_actions: int, hidden: int = 128):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(obs_dim, hidden), nn.ReLU(),
                                    nn.Linear(hidden, hidden), nn.ReLU(),
                                    nn.Linear(hidden, n_actions))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.layers(obs)

    @staticmethod
    def outputs_fit(out, batch: int, n_actions: int) -> bool:
        return isinstance(out, torch.Tensor) and tuple(out.shape) == (batch, n_actions)

    @staticmethod
    def outputs_wanted(n_actions: int) -> str:
        return f"Q-values [batch, {n_actions}]"


class DuelingQNetwork(QNetwork):
    """DQN's network with a dueling head (Wang et al. 2016): a shared trunk, then a state
    value V and per-action advantages A, combined as Q = V + A - mean(A).

    Why: once CartPole is solved, both actions' values are near 1 / (1 - gamma) (100 at
    gamma 0.99) and what decides the action is their small gap. One head that learns
    both Q-values moves them together and the gap is a difference of two large, noisy
    numbers; here V carries the large part and A learns the gap on its own (docs/rl.md,
    "Holding what dqn learned", has the analysis). Subtracting the mean fixes A's level,
    so V and A are identifiable. The layers are created in the order trunk, value,
    advantage: a seed gives the same initial network as this architecture built through
    ``--net``."""

    def __init__(self, obs_dim: int, n_actions: int, hidden: int = 128):
        nn.Module.__init__(self)
        self.trunk = nn.Sequential(nn.Linear(obs_dim, hidden), nn.ReLU(),
                                   nn.Linear(hidden, hidden), nn.ReLU())
        self.value = nn.Linear(hidden, 1)
        self.advantage = nn.Linear(hidden, n_actions)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        features = self.trunk(obs)
        advantages = self.advantage(features)
        return self.value(features) + advantages - advantages.mean(-1, keepdim=True)


def run_network(config, shape: EnvShape) -> nn.Module:
    """The network a run with ``config`` (an ``RLConfig``) starts from: the learner's, of
    which the actors' published copies, the best policy's copy and the evaluations' are
    copies. ``dueling`` is read only by the algorithms that have it (dqn): the others
    carry its default unread."""
    dueling = config.dueling and config.algo in ALGO_SETTINGS["dueling"]
    return build_network(config.algo, shape, config.network_width, config.net,
                         dueling=dueling)


def build_network(algo: str, shape: EnvShape, hidden: int, spec: str | None = None, *,
                  dueling: bool = False):
    """The network for ``algo``: its built-in one (``network`` of its strategy class; with
    ``dueling``, dqn's :class:`DuelingQNetwork`), or the user's: ``spec`` (``module:make``)
    is called as ``make(obs_dim, n_actions)`` and must return what the algorithm expects
    (what its built-in network returns). A ``spec`` is built as it is, ``dueling`` or not
    (the settings refuse asking for both: ``config.refuse_built_in_with_own_net``)."""
    expected = strategy_class(algo).network
    if dueling and expected is not QNetwork:   # run_network asks only for dqn's
        raise ValueError(f"{algo}'s network has no Q-values to give a dueling head")
    if spec is not None:
        model = call_factory(spec, named('net'), shape.obs_dim, shape.n_actions)
        if not isinstance(model, nn.Module):
            raise UserError(f"{named('net')} {spec!r} returned {type(model).__name__}, not an "
                            "nn.Module")
    else:
        built_in = DuelingQNetwork if dueling else expected
        model = built_in(shape.obs_dim, shape.n_actions, hidden)
    # The built-in networks' own errors are mptrain's bugs: a traceback.
    theirs = raised_by_users_code(f"{named('net')} {spec!r}: its forward pass on a batch of "
                                  "2 observations") if spec is not None else nullcontext()
    with torch.no_grad(), theirs:
        out = model(torch.zeros(2, shape.obs_dim))
    if not expected.outputs_fit(out, batch=2, n_actions=shape.n_actions):
        raise UserError(f"{named('net')}: {spec or 'the built-in network'} must return "
                        f"{expected.outputs_wanted(shape.n_actions)} for {named('algo')} {algo}; "
                        f"for a batch of 2 observations it got {shapes_of(out)}")
    return model
