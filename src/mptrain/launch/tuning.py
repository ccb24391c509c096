"""Per-process settings that decide multi-process throughput: threads and the allocator.

Both are measured traps on a small machine:
- two torch threads per worker on 2 cores made an epoch 10-20x slower, so every worker gets
  ``cores // workers`` threads unless told otherwise;
- glibc returns freed activation memory to the OS and faults it in again every step
  (0.3-0.8 s of page faults per epoch, at random per process); raising the mmap/trim
  thresholds keeps that memory in the heap.
"""

from __future__ import annotations

import ctypes
import os
import sys

import torch

from . import openmp

_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
MALLOC_SETTINGS = {  # mallopt parameter -> (environment variable, value)
    _M_MMAP_THRESHOLD: ("MALLOC_MMAP_THRESHOLD_", 32 * 1024 * 1024),
    _M_TRIM_THRESHOLD: ("MALLOC_TRIM_THRESHOLD_", 1024 * 1024 * 1024),
    _M_TOP_PAD: ("MALLOC_TOP_PAD_", 64 * 1024 * 1024),
}
THREAD_ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def threads_per_worker(workers: int, requested: int | None, cores: int) -> int:
    """mptrain's budget, ``cores // workers``, or the ``requested`` count (``--threads-per-
    worker``) up to the cores: more threads in one process than cores only time-share
    them, and each step waits for the slowest (64 threads on 2 cores trained 20x slower).
    :func:`thread_cap` caps it again once the number of processes is known."""
    if requested is not None:
        return min(requested, cores)
    return max(1, cores // workers)


def thread_cap(threads: int, processes: int, cores: int) -> int:
    """``threads`` in each of ``processes`` processes, capped so that together they take no
    more than the ``cores`` (one each at least)."""
    return min(threads, max(1, cores // processes))


def child_environment(threads: int) -> dict:
    """Variables a spawn'd child must see before it imports torch (fork inherits the heap)."""
    env = {name: str(threads) for name in THREAD_ENV_VARS}
    env.update({name: str(value) for name, value in MALLOC_SETTINGS.values()})
    return env


def _glibc_function(name: str):
    """glibc's allocator call ``name``, or None where there is none (not Linux; musl has
    neither mallopt nor malloc_trim)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        # The symbols the interpreter already links (glibc's among them). Not
        # ctypes.util.find_library("c"): that runs `ldconfig -p` in a subprocess, in every
        # worker.
        return getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None


def tune_malloc() -> bool:
    """Apply the allocator thresholds to this process; False where glibc is not available."""
    mallopt = _glibc_function("mallopt")
    if mallopt is None:
        return False
    return all(mallopt(param, value) == 1 for param, (_, value) in MALLOC_SETTINGS.items())


def release_free_heap() -> bool:
    """Return the free pages of this process's heap to the system (glibc's malloc_trim).

    Called in the parent before it forks workers: a child's first allocations otherwise
    land in the parent's freed memory, and every page it writes there is copied (a
    copy-on-write fault) instead of being a fresh zero page, which is much cheaper -- with
    64 workers, `perf` saw a tenth of the time copying pages (`copy_mc_*`) in the workers.
    False where the C library has no such call.
    """
    trim = _glibc_function("malloc_trim")
    if trim is None:
        return False
    trim(0)
    return True


def apply_threads(threads: int) -> None:
    """torch's intra-op threads for this process (children get the environment variables
    from ``child_environment`` before they start)."""
    if threads > 1:
        openmp.may_have_started_threads()
    torch.set_num_threads(threads)
