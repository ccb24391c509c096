"""Fork where it is safe and fastest, spawn where CUDA is involved, and say why."""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import sys

import torch

from ..errors import UserError
from ..errors import setting_name as named   # as the caller spelled the setting
from . import openmp


AS_REQUESTED = "as requested"
AUTOGRAD_THREADS = ("a backward pass already ran in this process with a GPU visible, so "
                    "autograd's device threads run and forked workers could not train")
CUDA_DRIVER = ("the CUDA driver was initialised in this process (torch.cuda.is_available() "
               "and a step of Adam or another optimizer that can be captured in a CUDA "
               "graph do that where a GPU is visible), and a forked worker's first CUDA "
               "call -- that step's check included -- would fail")


def choose_start_method(requested: str | None, device: str,
                        threads: int = 1) -> tuple[str, str]:
    """Return ``(method, reason)``.

    A forked child that runs torch with more than one thread hangs in its first parallel
    operation once the parent has used OpenMP threads (GNU OpenMP is not fork-safe;
    measured here: a conv2d never returns). So workers with more than one thread are forked
    only from a process kept on one thread since its start (``openmp``: the ``mptrain``
    command's, for ``run`` and ``rl``);
    otherwise they come from a fork server that never ran a parallel region.
    """
    available = multiprocessing.get_all_start_methods()
    if requested is not None:
        if requested not in available:
            raise UserError(f"start method {requested!r} is not available on this platform; "
                            f"choose one of: {', '.join(available)}")
        if requested == "fork":
            if device == "cuda":
                raise UserError(f"{named('start_method')} fork cannot be used with "
                                f"{named('device')} cuda: a forked child cannot initialise "
                                "CUDA; use spawn (the default for CUDA)")
            check_fork_safe()
            if threads > 1 and not openmp.can_fork_multithreaded_children():
                raise UserError(f"{named('start_method')} fork with {threads} threads per "
                                "worker would hang (OpenMP is not fork-safe); use "
                                f"{named('threads_per_worker')} 1 or {named('start_method')} "
                                "forkserver")
        return requested, AS_REQUESTED
    if device == "cuda":
        return "spawn", "CUDA cannot be used in forked children"
    if "fork" not in available or sys.platform == "darwin":
        return "spawn", "fork is unsafe or unavailable on this platform"
    if torch.cuda.is_initialized():
        return "spawn", "CUDA is initialised in this process, so forking is unsafe"
    unsafe = fork_unsafe_reason()
    if unsafe:
        return ("forkserver" if "forkserver" in available else "spawn"), unsafe
    if threads > 1 and openmp.can_fork_multithreaded_children():
        return "fork", f"{threads} threads per worker, forked from a parent that never " \
                       "ran OpenMP threads: fastest start, data inherited without copies"
    if threads > 1:
        if "forkserver" in available:
            return "forkserver", f"{threads} threads per worker: OpenMP is not fork-safe"
        return "spawn", f"{threads} threads per worker: OpenMP is not fork-safe"
    return "fork", "CPU training on Linux, 1 thread per worker: fastest start, data " \
                   "inherited without copies"


def check_fork_safe() -> None:
    if torch.cuda.is_initialized():
        raise UserError("CUDA is already initialised in this process, and forked workers "
                        f"would crash on first CUDA use; use {named('start_method')} spawn, or "
                        "do not touch CUDA before calling mptrain")
    unsafe = fork_unsafe_reason()
    if unsafe:
        raise UserError(f"{named('start_method')} fork cannot be used here: {unsafe}; use "
                        f"{named('start_method')} forkserver or spawn, or train in a fresh "
                        "process")


def fork_unsafe_reason() -> str | None:
    """Why workers can no longer be forked from this process although torch's CUDA state
    says nothing of it, or None: what torch does on a machine with a GPU before any CUDA
    tensor exists (``torch.cuda.is_initialized()`` stays False through both)."""
    if autograd_device_threads_started():
        return AUTOGRAD_THREADS
    if cuda_driver_initialised():
        return CUDA_DRIVER
    return None


def backward_ends_forking() -> bool:
    """Whether a backward pass in this process would start autograd's device threads (and
    an Adam step initialise the CUDA driver), after which workers cannot be forked: a
    torch built with CUDA that sees a GPU. torch counts through NVML where it can, which
    leaves the CUDA driver of this process alone."""
    return torch.cuda.device_count() > 0


def autograd_device_threads_started(tasks: str = "/proc/self/task") -> bool:
    """Whether autograd's device threads run in this process.

    A torch built with CUDA that sees a GPU starts them at the first backward pass -- a
    CPU model's included -- and initialises the CUDA driver on the way, while
    ``torch.cuda.is_initialized()`` stays False. From then on a forked child fails at its
    first backward ("Unable to handle autograd's threading in combination with fork-based
    multiprocessing") or its first CUDA call: seen on an H200 when ``mptrain.fit`` forked
    workers from a process that had trained before (a notebook, a test session). torch has
    no query for it; the threads are named ``pt_autograd_<device>``, so their names are
    read from ``/proc``. Where there is no ``/proc`` (not Linux) there is no fork to guard.
    """
    try:
        threads = os.listdir(tasks)
    except OSError:
        return False
    for thread in threads:
        try:
            with open(os.path.join(tasks, thread, "comm"), encoding="utf-8",
                      errors="replace") as name:
                if name.read().startswith("pt_autograd_"):
                    return True
        except OSError:   # the thread ended while we looked
            continue
    return False


def cuda_driver_initialised(maps: str = "/proc/self/maps") -> bool:
    """Whether ``cuInit`` ran in this process.

    ``torch.cuda.is_available()`` initialises the driver (through ``cudaGetDeviceCount``)
    unless PYTORCH_NVML_BASED_CUDA_CHECK is set, and the ``step`` of every optimizer that
    can be captured in a CUDA graph (Adam, AdamW, RMSprop, ...; not SGD) calls it, then
    asks whether the current stream is capturing -- on a CPU model too. A child forked
    afterwards fails its own step with "CUDA error: initialization error": seen on an H200
    in hogwild and sharded ddp runs with Adam, started from a test process that had stepped
    an optimizer.
    A torch built without CUDA never loads the driver's library, so its absence from this
    process's mappings settles it cheaply. A CUDA build maps it from ``import torch`` on
    (torch 2.11+cu130 on that H200), uninitialised; there the driver itself answers:
    ``cuDeviceGetCount`` reports CUDA_ERROR_NOT_INITIALIZED before ``cuInit`` and
    initialises nothing (checked there: False after import and ``device_count()``, which
    counts through NVML; True after ``is_available()``).
    """
    try:
        with open(maps, encoding="utf-8", errors="replace") as mapped:
            if not any("/libcuda.so" in line for line in mapped):
                return False
    except OSError:   # not Linux: no /proc, and no fork to guard
        return False
    try:
        driver = ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        count_devices = driver.cuDeviceGetCount
    except (OSError, AttributeError):
        return True   # mapped but not under its usual name: assume it was initialised
    count_devices.argtypes, count_devices.restype = [ctypes.POINTER(ctypes.c_int)], ctypes.c_int
    count = ctypes.c_int(0)
    # Only CUDA_SUCCESS means a working driver was initialised. The toolkit's stub library
    # (build containers) answers 34 from import on, a failed cuInit (no usable GPU) its own
    # error: a forked child then finds no CUDA either, so there is nothing to break.
    return count_devices(ctypes.byref(count)) == 0
