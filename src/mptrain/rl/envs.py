"""Environments by Gymnasium id (``CartPole-v1``) or import string (``my_pkg.envs:make``).

Gymnasium is an optional dependency (``pip install 'mptrain[rl]'``): it is imported only
when an environment is made, so ``import mptrain.rl`` works without it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UserError
from ..errors import setting_name as named   # as the caller spelled the setting
from ..imports import call_factory, colon_hint, is_import_string

INSTALL_HINT = "reinforcement learning needs gymnasium: pip install 'mptrain[rl]'"
#: What the actors use of an environment (one made otherwise than by Gymnasium may do).
ENV_API = ("reset", "step", "close", "action_space", "observation_space")


def require_gymnasium():
    try:
        import gymnasium
    except ImportError:
        raise UserError(INSTALL_HINT) from None
    return gymnasium


def make_env(spec: str, seed: int | None = None):
    """A fresh environment for ``spec``; ``seed`` seeds its first reset and action space."""
    gymnasium = require_gymnasium()
    if is_import_string(spec):
        env = call_factory(spec, named('env'))
        missing = [name for name in ENV_API if not hasattr(env, name)]
        if missing:
            raise UserError(f"{named('env')} {spec!r} returned {type(env).__name__}, which has "
                            f"no {', '.join(missing)}; the factory must return a Gymnasium "
                            "environment (gymnasium.make(...) or a gymnasium.Env)")
    else:
        try:
            env = gymnasium.make(spec)
        except gymnasium.error.Error as err:
            raise UserError(f"{named('env')} {spec!r}{colon_hint(spec)}: {err}; give a "
                            "Gymnasium id such as "
                            "CartPole-v1 or an import string 'module:make_env'") from None
    if seed is not None:
        env.action_space.seed(seed)
    return env


@dataclass(frozen=True)
class EnvShape:
    """What a network needs to know about an environment."""

    name: str
    obs_dim: int
    n_actions: int


def env_shape(spec: str) -> EnvShape:
    """Check that ``spec`` is an environment the built-in algorithms can learn (flat
    observations, discrete actions) and return its sizes."""
    gymnasium = require_gymnasium()
    env = make_env(spec)
    try:
        obs, act = env.observation_space, env.action_space
        if not isinstance(act, gymnasium.spaces.Discrete):
            raise UserError(f"{named('env')} {spec!r} has {type(act).__name__} actions; the "
                            "algorithms here need a Discrete action space")
        if not isinstance(obs, gymnasium.spaces.Box) or len(obs.shape) != 1:
            raise UserError(f"{named('env')} {spec!r} has observations {obs}; the built-in "
                            f"networks need a flat Box (give your own with {named('net')} "
                            "module:make)")
        return EnvShape(spec, int(obs.shape[0]), int(act.n))
    finally:
        env.close()


@dataclass(frozen=True)
class EnvSource:
    """What workers receive instead of a data set: the environment's sizes (they make
    their environments from the config's ``env``). Nothing of it lives in shared memory
    (the strategies put their shared state there)."""

    shape: EnvShape
    nbytes = 0   # the shared-memory check's question: none of it is there

    def share_memory_(self) -> "EnvSource":
        return self

    def materialize_(self) -> "EnvSource":
        return self
