"""``--help``'s defaults: what a run uses for a setting it is not given, per built-in data
set where the data set's recipe (``data.recipes``) decides it."""

from __future__ import annotations

from ..config import SETTING_DEFAULTS
from ..data.recipes import GENERIC_DEFAULTS, RECIPES, TrainingDefaults


def default_text(name: str, federated: bool = False) -> str:
    """What the run uses for setting ``name`` when it is not said, per data set where it
    depends on it, as ``--help`` shows it: ``default: digits 20, linreg 8, digits-60k/mnist/
    your data 100`` (``federated``: under fedavg, whose recipe is its own)."""
    by_value: dict = {}
    for data, recipe in [*RECIPES.items(), ("your data", GENERIC_DEFAULTS)]:
        value = _recipe_value(recipe, name, federated)
        by_value.setdefault(_shown(value), []).append(data)
    if len(by_value) == 1:
        return f"default {next(iter(by_value))}"
    return "default: " + ", ".join(f"{'/'.join(names)} {value}"
                                   for value, names in by_value.items())


def _recipe_value(recipe: TrainingDefaults, name: str, federated: bool):
    if federated and name in recipe.federated:
        return recipe.federated[name]
    common = recipe.common()
    if name in common:
        return common[name]
    return SETTING_DEFAULTS[name]


def _shown(value) -> str:
    if value is None:   # sync_every: once per epoch (config.ONCE_PER_EPOCH)
        return "epoch"
    return f"{value:g}" if isinstance(value, float) else str(value)
