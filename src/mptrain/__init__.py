"""mptrain: train PyTorch models with several processes on one machine, correctly and fast.

Strategies (``single``, ``hogwild``, ``sync``, ``ddp``, ``fedavg``) are one switch apart::

    import mptrain
    result = mptrain.fit(model, train_set, test_set, strategy="sync", workers=4, epochs=3)
    print(result.test_accuracy)

The names below are imported on first use (``imports.lazy_exports``): importing the package
does not import torch.
"""

from .imports import lazy_exports

__version__ = "0.1.0"
__all__ = ["fit", "FitResult", "TrainConfig", "UserError", "WorkerFailedError", "load_data"]
__getattr__, __dir__ = lazy_exports(__name__, {
    "fit": ".api", "TrainConfig": ".config", "FitResult": ".result", "UserError": ".errors",
    "WorkerFailedError": ".errors", "load_data": ".data.sources"})
