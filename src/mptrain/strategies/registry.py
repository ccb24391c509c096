"""Every strategy by name, supervised and RL: adding one is a module and a line here.

A strategy's family -- ``supervised`` (``mptrain run --strategy``) or ``rl`` (``mptrain rl
--algo``) -- is a fact of its class (``Strategy.family``), written here too so that the
names of a family are known without importing it.

Each class is imported when first asked for, not with this module: the command line offers
the names and refuses a wrong one before torch is imported (a second that ``--help``, a
refused flag or the MNIST files read meanwhile do not wait for).
"""

from __future__ import annotations

import importlib

#: name -> (family, "module:class" relative to this package), in the order ``--help``
#: offers them; the first of a family is its default.
_HOMES = {
    "single": ("supervised", ".single:SingleStrategy"),
    "hogwild": ("supervised", ".hogwild:HogwildStrategy"),
    "sync": ("supervised", ".sync:SyncStrategy"),
    "ddp": ("supervised", ".ddp:DDPStrategy"),
    "fedavg": ("supervised", ".fedavg:FedAvgStrategy"),
    "fedbuff": ("supervised", ".fedbuff:FedBuffStrategy"),
    "dp": ("supervised", ".data_parallel_gpus:DataParallelGPUsStrategy"),
    "a3c": ("rl", "..rl.a3c:A3CStrategy"),
    "dqn": ("rl", "..rl.dqn:DQNStrategy"),
    "ppo": ("rl", "..rl.ppo:PPOStrategy"),
}


def family_names(family: str) -> tuple[str, ...]:
    return tuple(name for name, (kind, _) in _HOMES.items() if kind == family)


#: ``mptrain run --strategy`` names, and ``mptrain rl --algo`` names.
STRATEGIES = family_names("supervised")
ALGOS = family_names("rl")

#: The strategy of a run that names none, and the one-process reference ``mptrain bench``
#: measures the others against.
DEFAULT_STRATEGY = "single"


def strategy_class(name: str):
    """The class of strategy ``name``, of either family (a ``KeyError`` for an unknown
    name)."""
    family, home = _HOMES[name]
    module, _, attribute = home.partition(":")
    cls = getattr(importlib.import_module(module, __package__), attribute)
    assert cls.name == name, f"{home} is named {cls.name!r}"
    assert cls.family == family, f"{home} is of family {cls.family!r}, not {family!r}"
    return cls


def strategy_classes() -> dict:
    """Every supervised strategy class by name."""
    return {name: strategy_class(name) for name in STRATEGIES}


def restricted_settings() -> dict[str, tuple[str, ...]]:
    """Each setting that only some strategies use, with the strategies that use it."""
    names: dict[str, list[str]] = {}
    for cls in strategy_classes().values():
        for setting in sorted(cls.settings):
            names.setdefault(setting, []).append(cls.name)
    return {name: tuple(users) for name, users in names.items()}


def make_strategy(config):
    return strategy_class(config.strategy)(config)
