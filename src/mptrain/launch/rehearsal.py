"""What every forked worker would pay on its first training step, paid once in the parent.

A process's first training step costs several times a later one: oneDNN generates (JITs)
its convolution kernels for these shapes and layouts, and torch and Python fill lazy caches
of their own. Forked workers inherit all of that from the parent. With more workers than
cores they run one after another, so what each pays at its start is paid in sequence, 64
times over with 64 workers on 2 cores; a throwaway step in the parent before the fork pays
it once (``benchmarks/fork_first_steps.py``: the MNIST CNN in channels-last with Adam, as
digits-60k trains it, for a 64-worker shard: a forked child's first step 18.8 instead of
37.7 ms, its 15 steps 156 instead of 185 ms of CPU).

The rehearsal runs the model's forward and backward once in the parent, on a copy, so it
must leave nothing behind that workers could inherit: a model with hooks (user code that
may record or count) is not rehearsed, and torch's, Python's and numpy's random number
generators are put back as they were.
"""

from __future__ import annotations

import copy
import logging
import random
import sys
from contextlib import contextmanager

import torch
import torch.nn as nn

from ..engine.channels_last import ChannelsLastTraining
from ..engine.optim import build_optimizer
from ..engine.autocast import in_precision
from ..engine.step import train_step
from ..models import model_bytes
from . import openmp
from .start_method import backward_ends_forking

log = logging.getLogger(__name__)

#: A larger model is not rehearsed: its copy would be a second model in the parent's
#: memory, and a step of it costs more than what the rehearsal saves each worker.
MAX_MODEL_BYTES = 64 * 2**20

#: torch's process-wide hooks, run for every module or optimizer (user code), by module.
_GLOBAL_HOOKS = {
    "torch.nn.modules.module": ("_global_forward_hooks", "_global_forward_pre_hooks",
                                "_global_backward_hooks", "_global_backward_pre_hooks"),
    "torch.optim.optimizer": ("_global_optimizer_pre_hooks", "_global_optimizer_post_hooks"),
}


def worth_rehearsing(workers: int, cores: int, device: str) -> bool:
    """For forked workers (the caller's condition): only CPU workers share kernels with the
    parent, and only when workers outnumber cores do their first steps queue one after
    another; with no more workers than cores they pay them side by side, and a step in the
    parent would only delay the start. Never where a GPU is visible: the rehearsal's
    backward pass would start autograd's device threads, and the workers about to be forked
    could not train (``start_method.backward_ends_forking``)."""
    return device == "cpu" and workers > cores and not backward_ends_forking()


def rehearse_first_steps(model: nn.Module, data, config, threads: int, channels_last: bool,
                         batch_sizes=None) -> bool:
    """Train a throwaway copy of ``model`` for one step at each of ``batch_sizes`` (those a
    worker trains on: a full batch, and the shorter last one of its shard, each a new shape
    to generate kernels for; default: the configured batch size), at the workers' thread
    count and in the layout workers will train it in: channels-last (a conv net on CPU)
    where ``channels_last`` says workers train replicas of their own, else as it is.
    ``model``, the random number generators and the thread count are left as they were.

    False, and nothing done, for a large model or one with hooks; False too when a step
    fails: workers will meet, and report, any real error themselves.
    """
    if model_bytes(model) > MAX_MODEL_BYTES or len(data.train) == 0 or _has_hooks(model):
        return False
    previous_threads = torch.get_num_threads()
    if threads > 1:
        openmp.may_have_started_threads()
    torch.set_num_threads(threads)
    try:
        with _random_state_kept():
            replica = copy.deepcopy(model)
            forward = replica
            if channels_last:
                layout = ChannelsLastTraining(replica, torch.device("cpu"))
                forward = layout.forward if layout.active else replica
            forward = in_precision(forward, config.precision, torch.device("cpu"))
            replica.train()
            optimizer = build_optimizer(replica.parameters(), config.optimizer, config.lr,
                                        config.momentum, config.weight_decay)
            for batch_size in batch_sizes or [config.batch_size]:
                inputs, targets = data.train.batch(torch.arange(min(batch_size,
                                                                    len(data.train))))
                train_step(forward, optimizer, inputs, targets, data.task)
    except Exception as err:  # noqa: BLE001 -- a rehearsal only; workers report real errors
        log.debug("first-step rehearsal skipped: %r", err)
        return False
    finally:
        torch.set_num_threads(previous_threads)
    return True


def _has_hooks(model: nn.Module) -> bool:
    for module in model.modules():
        if module._forward_hooks or module._forward_pre_hooks or module._backward_hooks \
                or getattr(module, "_backward_pre_hooks", None):
            return True
    for tensor in list(model.parameters()) + list(model.buffers()):
        if tensor._backward_hooks or getattr(tensor, "_post_accumulate_grad_hooks", None):
            return True
    # A module not imported yet has no hooks registered (torch loads its optimizers lazily).
    return any(getattr(sys.modules.get(owner), name, None)
               for owner, names in _GLOBAL_HOOKS.items() for name in names)


@contextmanager
def _random_state_kept():
    """torch's CPU generator, Python's and numpy's global ones as they were: a forward that
    draws from any of them must not move what workers inherit."""
    numpy = sys.modules.get("numpy")
    python_state = random.getstate()
    numpy_state = numpy.random.get_state() if numpy is not None else None
    try:
        with torch.random.fork_rng(devices=[]):
            yield
    finally:
        random.setstate(python_state)
        if numpy_state is not None:
            numpy.random.set_state(numpy_state)

