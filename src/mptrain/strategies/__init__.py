"""Strategies by name: each is one small class that owns its worker program (``base``) and
declares its own facts; ``registry`` lists them. Names are imported on first use: the
command line reads the registry before torch is imported."""

from ..imports import lazy_exports

__all__ = ["Strategy", "WorkerProgram", "RoundWork", "ResourceNeeds", "make_strategy",
           "STRATEGIES"]
__getattr__, __dir__ = lazy_exports(__name__, {
    "Strategy": ".base", "WorkerProgram": ".base", "RoundWork": ".base",
    "ResourceNeeds": ".base", "make_strategy": ".registry", "STRATEGIES": ".registry"})
