"""mptrain: train PyTorch models with several processes on one machine, correctly and fast.

Strategies (``single``, ``hogwild``, ``sync``, ``ddp``, ``fedavg``) are one switch apart::

    import mptrain
    result = mptrain.fit(model, train_set, test_set, strategy="sync", workers=4, epochs=3)
    print(result.test_accuracy)
"""

from .api import fit
from .config import TrainConfig
from .errors import UserError, WorkerFailedError
from .result import FitResult

__version__ = "0.1.0"
__all__ = ["fit", "FitResult", "TrainConfig", "UserError", "WorkerFailedError"]
