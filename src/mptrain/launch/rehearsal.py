"""What every forked worker would pay on its first training step, paid once in the parent.

A process's first training step costs several times a later one: oneDNN generates (JITs)
its convolution kernels for these shapes and layouts, and torch and Python fill lazy caches
of their own. Forked workers inherit all of that from the parent. With more workers than
cores they run one after another, so what each pays at its start is paid in sequence, 64
times over with 64 workers on 2 cores; a throwaway step in the parent before the fork pays
it once (DigitsCNN, 15 steps in a forked child: 55 instead of 77 ms of CPU).

The parent then gives its heap's free pages back to the system. A child's first
allocations otherwise land in the parent's freed memory, and every page it writes there is
copied (a copy-on-write fault) instead of being a fresh zero page, which is much cheaper:
with 64 workers, `perf` saw ten times less time copying pages (`copy_mc_*`) in the workers.
"""

from __future__ import annotations

import copy
import ctypes
import sys

import torch
import torch.nn as nn

from ..engine.channels_last import ChannelsLastTraining
from ..engine.optim import build_optimizer
from ..engine.task import loss_fn

#: A larger model is not rehearsed: its copy would be a second model in the parent's
#: memory, and a step of it costs more than what the rehearsal saves each worker.
MAX_MODEL_BYTES = 64 * 2**20


def worth_rehearsing(workers: int, cores: int, start_method: str | None, device: str) -> bool:
    """Only forked CPU workers inherit what the parent did, and only when workers outnumber
    cores do their first steps run in sequence; otherwise they pay them side by side, and a
    step in the parent would only delay the start."""
    return start_method == "fork" and device == "cpu" and workers > cores


def rehearse_first_step(model: nn.Module, data, config, threads: int) -> bool:
    """Train a throwaway copy of ``model`` for one step, at the workers' batch size and
    thread count, in every layout a worker may train it in: channels-last for a private
    replica of a conv net, the model's own layout for a shared one (hogwild, torch's DDP).
    ``model``, the random number generator and the thread count are left as they were.

    False, and nothing done, for a large model, or a model or data the rehearsal cannot use
    (workers will meet, and report, any real error themselves).
    """
    size = sum(t.numel() * t.element_size() for t in list(model.parameters())
               + list(model.buffers()))
    if size > MAX_MODEL_BYTES or len(data.train) == 0:
        return False
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.random.fork_rng(devices=[]):
            inputs, targets = data.train.batch(torch.arange(min(config.batch_size,
                                                                len(data.train))))
            plain = copy.deepcopy(model)
            _one_step(plain, plain, inputs, targets, data.task, config)
            replica = copy.deepcopy(model)
            layout = ChannelsLastTraining(replica, torch.device("cpu"))
            if layout.active:
                _one_step(replica, layout.forward, inputs, targets, data.task, config)
    except Exception:  # noqa: BLE001 -- a rehearsal only; workers report real errors
        return False
    finally:
        torch.set_num_threads(previous_threads)
    return True


def _one_step(replica: nn.Module, forward, inputs, targets, task: str, config) -> None:
    replica.train()
    optimizer = build_optimizer(replica.parameters(), config.optimizer, config.lr,
                                config.momentum, config.weight_decay)
    optimizer.zero_grad(set_to_none=True)
    loss_fn(task, forward(inputs), targets).backward()
    optimizer.step()


def release_free_heap() -> bool:
    """Return the free pages of this process's heap to the system (glibc's malloc_trim),
    so that children forked next get fresh pages rather than copies of freed ones; False
    where the C library has no such call (musl, macOS)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    trim(0)
    return True
