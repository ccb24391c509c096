"""``--compile``: each worker's model under ``torch.compile``, compiled once per machine.

A compile is expensive and the same for every worker: the MNIST CNN's first compiled step
took 64 s on the 2-core reference machine with a cold cache and 4 s with a warm one (torch
2.13, inductor's on-disk cache in ``/tmp/torchinductor_$USER``, which every process of the
user shares). Workers started together would all find the cache cold and all pay the full
compile, side by side on the same cores. So the first worker to reach a model compiles it
while holding a file lock, and the others wait for it and then compile from the cache:
N workers pay one compile and N cache reads.

The module is compiled in place (its ``forward``): its ``state_dict`` keeps its keys,
so checkpoints, the shared model and the collectives see the same names as without
``--compile``.

On a GPU, ``mode="reduce-overhead"`` records the step in CUDA graphs -- launch overhead is
what a small model's step is made of -- where the strategy's step is one replayable
sequence; strategies whose gradient hooks run inside backward (sync, ddp, dp: averaging
while backward runs) use the default mode and say why.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Callable

import torch
import torch.nn as nn

from ..errors import UserError
from ..errors import setting_name as named   # as the caller spelled the setting

log = logging.getLogger(__name__)

#: ``torch.compile``'s mode on a GPU where CUDA graphs are allowed, and everywhere else.
CUDA_GRAPHS = "reduce-overhead"
DEFAULT = "default"


def compile_refusal(device_type: str) -> str | None:
    """Why ``torch.compile`` cannot work here, with what to do, or None."""
    try:
        # The package first: importing torch._dynamo.eval_frame on its own, in a process
        # that has not loaded dynamo yet (the CLI's), is a circular import in torch 2.13.
        import torch._dynamo
        supported = torch._dynamo.is_dynamo_supported()
    except Exception:   # noqa: BLE001 -- any failure to ask is an unsupported torch/Python
        supported = False
    if not supported:
        return (f"{named('compile')}: torch {torch.__version__} cannot compile on Python "
                f"{sys.version.split()[0]}; use a Python version this torch supports, or "
                f"train without {named('compile')}")
    if device_type == "cpu" and not any(shutil.which(cc) for cc in ("c++", "g++", "clang++")):
        return (f"{named('compile')} on CPU needs a C++ compiler (torch's inductor generates "
                "C++), and none was found on PATH; install one (e.g. apt-get install g++) or "
                f"train without {named('compile')}")
    if device_type == "cuda":
        try:
            from torch.utils._triton import has_triton
            triton = has_triton()
        except Exception:   # noqa: BLE001
            triton = False
        if not triton:
            return (f"{named('compile')} on a GPU needs Triton, which this torch cannot "
                    "import; install the triton build that matches torch, or train without "
                    f"{named('compile')}")
    return None


def check_compilable(device_type: str) -> None:
    """Refuse ``--compile`` in one line before any worker starts."""
    reason = compile_refusal(device_type)
    if reason is not None:
        raise UserError(reason)


def compile_mode(device_type: str, cuda_graphs_allowed: bool) -> str:
    return CUDA_GRAPHS if device_type == "cuda" and cuda_graphs_allowed else DEFAULT


def compile_in_place(module: nn.Module, mode: str) -> None:
    """Compile ``module``'s forward on the instance: its ``state_dict`` keys, hooks and
    ``__call__`` stay as they are. Not ``nn.Module.compile``: that compiles ``_call_impl``,
    a frame in torch's own files, and dynamo skips those together with every frame that
    is torch's too -- a model made of ``nn.Sequential`` and torch's layers was not compiled
    at all (first call 3.5 ms instead of seconds, no frame traced; torch 2.13)."""
    module.forward = torch.compile(module.forward, mode=None if mode == DEFAULT else mode)


def compile_key(module: nn.Module, inputs: torch.Tensor, mode: str, precision: str) -> str:
    """What makes two workers' compiles the same: torch, the network, the batch's shape,
    dtype, layout and device, the mode and the precision. Only used to order compiles --
    inductor's own cache decides what is reused, so a wrong guess costs time, never
    correctness."""
    facts = (torch.__version__, type(module).__qualname__, repr(module), tuple(inputs.shape),
             str(inputs.dtype), inputs.is_contiguous(memory_format=torch.channels_last),
             inputs.device.type, mode, precision)
    return hashlib.sha256(repr(facts).encode()).hexdigest()[:24]


def _locks_dir() -> Path:
    try:
        from torch._inductor.runtime.cache_dir_utils import cache_dir
        base = Path(cache_dir())
    except Exception:   # noqa: BLE001 -- an older layout: inductor's default folder
        base = Path(os.environ.get("TORCHINDUCTOR_CACHE_DIR")
                    or Path("/tmp") / f"torchinductor_{os.environ.get('USER', 'user')}")
    folder = base / "mptrain-compiles"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@contextlib.contextmanager
def first_compile_in_turn(key: str, locks: Path | None = None):
    """Run the body (a first compiled step) alone when no process has compiled ``key`` on
    this machine yet, else at once: the first caller holds the lock while it compiles,
    the others wait for it and then read inductor's cache in parallel.

    Yields True for the caller that compiled first."""
    folder = locks or _locks_dir()
    done = folder / f"{key}.done"
    if done.exists():
        yield False
        return
    with open(folder / f"{key}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if done.exists():   # another worker compiled while this one waited
                first = False
            else:
                first = True
                yield True
                done.touch()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    if not first:
        yield False


def warm_up(module: nn.Module, step: Callable[[], torch.Tensor]) -> float:
    """Run ``step`` (a forward and backward on a real batch) once to compile ``module``
    and give back everything the step changed: buffers (BatchNorm's statistics), the random
    generators (dropout) and the gradients. Returns the seconds it took."""
    buffers = {name: b.detach().clone() for name, b in module.named_buffers()}
    started = time.monotonic()
    devices = [torch.cuda.current_device()] if any(
        p.is_cuda for p in module.parameters()) else []
    with torch.random.fork_rng(devices=devices):
        step()
    for name, b in module.named_buffers():
        b.data.copy_(buffers[name])
    for p in module.parameters():
        p.grad = None
    if devices:
        torch.cuda.synchronize()
    return time.monotonic() - started


def compile_worker_model(module: nn.Module, forward: Callable, inputs: torch.Tensor,
                         targets: torch.Tensor, task: str, precision: str, mode: str) -> float:
    """Compile ``module`` in place and run its first compiled step now, on a real batch,
    in turn with the other workers of this machine (:func:`first_compile_in_turn`), so
    that the training loop's first step is an ordinary one. ``forward`` is the worker's
    own (layout and precision included). Returns the seconds the compile took here."""
    from .task import loss_fn

    key = compile_key(module, inputs, mode, precision)
    compile_in_place(module, mode)

    def step():
        loss = loss_fn(task, forward(inputs), targets)
        loss.backward()
        return loss

    with first_compile_in_turn(key):
        return warm_up(module, step)


def describe(device_type: str, mode: str, why_no_cuda_graphs: str | None) -> str:
    """The banner's line for ``--compile``."""
    line = f"compile: torch.compile, mode {mode}"
    if device_type == "cuda" and mode != CUDA_GRAPHS and why_no_cuda_graphs:
        line += f" (no CUDA graphs: {why_no_cuda_graphs})"
    return line + "; one worker compiles first, the others read its cache"


def compile_if_asked(config, module: nn.Module, forward: Callable, feed, data, task: str,
                     device: torch.device, no_cuda_graphs: str | None) -> None:
    """A worker's part of ``--compile``: ``module`` (the one it trains) compiled and its
    first step compiled on the first batch of ``data`` through ``feed``, before training.
    Nothing without ``--compile``."""
    if not getattr(config, "compile", False) or len(data) == 0:
        return
    inputs, targets = feed.batch(torch.arange(min(len(data), config.batch_size)))
    mode = compile_mode(device.type, no_cuda_graphs is None)
    seconds = compile_worker_model(module, forward, inputs, targets, task, config.precision,
                                   mode)
    log.info("compiled the model (mode %s) in %.1f s", mode, seconds)
