"""Strategies by name: each is one small class that owns its worker program (``base``)."""

from ..config import STRATEGIES, TrainConfig
from .base import RoundWork, Strategy, WorkerProgram
from .ddp import DDPStrategy
from .fedavg import FedAvgStrategy
from .hogwild import HogwildStrategy
from .single import SingleStrategy
from .sync import SyncStrategy

STRATEGY_CLASSES = {cls.name: cls for cls in
                    (SingleStrategy, HogwildStrategy, SyncStrategy, DDPStrategy, FedAvgStrategy)}
assert tuple(STRATEGY_CLASSES) == STRATEGIES, "config.STRATEGIES lists the classes here"


def make_strategy(config: TrainConfig) -> Strategy:
    return STRATEGY_CLASSES[config.strategy](config)


__all__ = ["Strategy", "WorkerProgram", "RoundWork", "make_strategy", "STRATEGY_CLASSES"]
