"""The RL algorithms by name: adding one is a module and a line here.

Like the strategies' registry, a class is imported when first asked for, so ``mptrain rl
--help`` offers the names without importing torch.
"""

from __future__ import annotations

import importlib

#: name -> "module:class", relative to this package; the first is the default.
_HOMES = {
    "a3c": ".a3c:A3CStrategy",
    "dqn": ".dqn:DQNStrategy",
}

ALGOS = tuple(_HOMES)


def algorithm_class(name: str):
    """The strategy class of RL algorithm ``name`` (a ``KeyError`` for an unknown name)."""
    module, _, attribute = _HOMES[name].partition(":")
    cls = getattr(importlib.import_module(module, __package__), attribute)
    assert cls.name == name, f"{_HOMES[name]} is named {cls.name!r}"
    return cls
