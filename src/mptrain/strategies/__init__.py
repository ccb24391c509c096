"""Strategies by name: each is one small class (see ``base.Strategy``)."""

from ..config import TrainConfig
from .base import Strategy
from .ddp import DDPStrategy
from .hogwild import HogwildStrategy
from .single import SingleStrategy
from .sync import SyncStrategy

STRATEGY_CLASSES = {cls.name: cls for cls in
                    (SingleStrategy, HogwildStrategy, SyncStrategy, DDPStrategy)}


def make_strategy(config: TrainConfig) -> Strategy:
    return STRATEGY_CLASSES[config.strategy](config)


__all__ = ["Strategy", "make_strategy", "STRATEGY_CLASSES"]
