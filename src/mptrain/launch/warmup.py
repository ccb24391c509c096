"""Pay lazy imports early and off the critical path.

The first ``torch.optim`` optimizer built in a process imports ``torch._dynamo`` (torch 2.x
wraps the optimizers' methods in ``torch._disable_dynamo``): 0.7-1.6 s of a 2-core machine.
This is mptrain's one answer to that cost. Where the workers build a ``torch.optim``
optimizer (``Strategy.builds_torch_optimizer``), the parent builds one here, in a thread
while the data set loads (mostly zlib and numpy, which release the GIL): it is usually done
by the time training starts, and with fork the workers inherit the import for free. Where
they build none -- the RL strategies step their own Adam (``rl.plain_adam``,
``rl.flat_adam``), the same arithmetic without ``torch.optim`` -- nobody pays it, in the
parent or in a worker another start method starts afresh.
Modules the parent needs only at the end (matplotlib, ~0.4 s, for the curves) are imported
the same way while its workers train and the parent only watches them, at the lowest CPU
priority, so that they use idle cores only.

Every such thread is joined before any fork: a child forked while another thread holds an
import lock deadlocks on its first import.
"""

from __future__ import annotations

import importlib
import os
import threading

import torch

from ..background import start_daemon

_optimizer_thread: threading.Thread | None = None
_threads: list[threading.Thread] = []


def _build_an_optimizer() -> None:
    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)


def _import(modules) -> None:
    _yield_to_everyone_else()
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:
            return  # whoever needs the module imports it again and sees the error


def _yield_to_everyone_else() -> None:
    """Lowest CPU priority for this thread (Linux: a nice value is per thread): what it
    imports while workers train then takes only cores they leave idle, and not a share of
    theirs (on 2 cores, 0.4 s of import would come out of the first epoch's throughput);
    once they are done it runs at full speed, as nothing else wants the cores."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):
        pass


def _start(target, name: str, *args) -> threading.Thread:
    """A quiet daemon (``background``): a failure in it is seen again by whoever needs the
    work, and one while the command exits early is no news."""
    thread = start_daemon(target, name, *args)
    _threads.append(thread)
    return thread


def start_in_background() -> None:
    global _optimizer_thread
    if _optimizer_thread is None:
        _optimizer_thread = _start(_build_an_optimizer, "mptrain-warmup")


def import_in_background(modules) -> None:
    """Import ``modules`` in a thread; :func:`finish` waits for it."""
    _start(_import, "mptrain-import", tuple(modules))


def wait_for_imports() -> None:
    """Return once every background import is done."""
    while _threads:
        _threads.pop().join()


def finish(build_optimizer: bool = True) -> None:
    """Return once every background import is done and, where the workers will build a
    ``torch.optim`` optimizer (``build_optimizer``), torch's lazy imports are paid (in the
    background thread or here): what must hold before a fork. Workers that build none would
    inherit an import they never use, paid on the run's critical path."""
    wait_for_imports()
    if build_optimizer and _optimizer_thread is None:
        _build_an_optimizer()
