"""Pay torch's lazy imports early and off the critical path.

The first optimizer built in a process imports ``torch._dynamo`` (~1 s here). Started in a
thread while the data set loads (mostly zlib and numpy, which release the GIL), it is
usually done by the time training starts; with fork, workers then inherit it for free.
The thread must be joined before any fork: a child forked while another thread holds an
import lock deadlocks on its first import.
"""

from __future__ import annotations

import threading

import torch

_thread: threading.Thread | None = None


def _build_an_optimizer() -> None:
    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)


def start_in_background() -> None:
    global _thread
    if _thread is None:
        _thread = threading.Thread(target=_build_an_optimizer, name="mptrain-warmup",
                                   daemon=True)
        _thread.start()


def finish() -> None:
    """Return once the lazy imports are done (in the background thread or here)."""
    if _thread is not None:
        _thread.join()
    else:
        _build_an_optimizer()
