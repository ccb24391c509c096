"""The strategies by name: adding one is a module and a line here.

Each class is imported when first asked for, not with this module: the command line offers
the names and refuses a wrong one before torch is imported (a second that ``--help``, a
refused flag or the MNIST files read meanwhile do not wait for).
"""

from __future__ import annotations

import importlib

#: name -> "module:class", relative to this package, in the order ``--help`` offers them.
_HOMES = {
    "single": ".single:SingleStrategy",
    "hogwild": ".hogwild:HogwildStrategy",
    "sync": ".sync:SyncStrategy",
    "ddp": ".ddp:DDPStrategy",
    "fedavg": ".fedavg:FedAvgStrategy",
    "dp": ".data_parallel_gpus:DataParallelGPUsStrategy",
}

STRATEGIES = tuple(_HOMES)

#: The strategy of a run that names none, and the one-process reference ``mptrain bench``
#: measures the others against.
DEFAULT_STRATEGY = "single"


def strategy_class(name: str):
    """The class of strategy ``name`` (a ``KeyError`` for an unknown name)."""
    module, _, attribute = _HOMES[name].partition(":")
    cls = getattr(importlib.import_module(module, __package__), attribute)
    assert cls.name == name, f"{_HOMES[name]} is named {cls.name!r}"
    return cls


def strategy_classes() -> dict:
    """Every strategy class by name."""
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
