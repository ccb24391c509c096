"""``mptrain doctor``: check the machine for the usual multi-process training traps, and find
what dead runs left behind (``leftovers``; ``--clean`` removes the caller's own).
"""

from __future__ import annotations

import multiprocessing
import os
import resource
from dataclasses import dataclass
from pathlib import Path

import torch

from . import leftovers
from .launch.start_method import fork_unsafe_reason

MIN_SHM_BYTES = 1 << 30
MIN_OPEN_FILES = 4096


@dataclass(frozen=True)
class Check:
    name: str
    status: str     # "ok", "warn", "fail"
    detail: str
    advice: str = ""


def find_all(shm_dir: str | Path | None = None, out: str | Path | None = None,
             temp_dir: str | Path | None = None) -> list[leftovers.Leftover]:
    """Everything dead runs left: segments (in /dev/shm), rendezvous and bench folders (in
    the temp folder), and temp files in ``out``."""
    found = leftovers.find_segments(shm_dir) + leftovers.find_rendezvous(temp_dir) \
        + leftovers.find_bench_folders(temp_dir)
    return found + (leftovers.find_temp_files(out) if out is not None else [])


def run_checks(shm_dir: str | Path | None = None, out: str | Path | None = None,
               temp_dir: str | Path | None = None) -> list[Check]:
    shm_dir = Path(shm_dir or leftovers.SHM_DIR)
    checks = [_check_shm(shm_dir), _check_open_files(), _check_start_methods(), _check_cuda(),
              _check_gpu_state_before_fork(), _check_thread_env(),
              _check_leftovers(find_all(shm_dir, out, temp_dir), shm_dir)]
    return [check for check in checks if check is not None]


def _check_shm(shm_dir: Path) -> Check:
    try:
        stats = os.statvfs(shm_dir)
    except OSError:
        return Check("shared memory", "warn", f"{shm_dir} does not exist",
                     "torch falls back to other mechanisms; multi-process runs may fail")
    total, free = stats.f_blocks * stats.f_frsize, stats.f_bavail * stats.f_frsize
    detail = f"{shm_dir}: {free / 2**30:.1f} GiB free of {total / 2**30:.1f} GiB"
    if total < MIN_SHM_BYTES:
        return Check("shared memory", "warn", detail,
                     "small /dev/shm (Docker's default is 64 MiB): start the container with "
                     "--shm-size=2g or larger")
    return Check("shared memory", "ok", detail)


def _check_open_files() -> Check:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    show = lambda v: "unlimited" if v == resource.RLIM_INFINITY else str(v)  # noqa: E731
    detail = f"soft {show(soft)}, hard {show(hard)}"
    if hard != resource.RLIM_INFINITY and hard < MIN_OPEN_FILES:
        return Check("open files", "warn", detail,
                     "a low hard limit forces the file_system sharing strategy for models "
                     "with many tensors; raise it with ulimit -Hn or in limits.conf")
    return Check("open files", "ok", detail + " (mptrain raises the soft limit itself)")


def _check_start_methods() -> Check:
    methods = multiprocessing.get_all_start_methods()
    if "fork" not in methods:
        return Check("start methods", "warn", ", ".join(methods),
                     "no fork: workers start with spawn, slower, and scripts need an "
                     "if __name__ == '__main__' guard")
    return Check("start methods", "ok", ", ".join(methods))


def _check_cuda() -> Check:
    if torch.cuda.is_initialized():
        return Check("CUDA before fork", "fail", "CUDA is initialised in this process",
                     "forked workers would crash; mptrain will use spawn")
    count = torch.cuda.device_count()
    if count == 0:
        return Check("CUDA", "ok", "no CUDA device (CPU training, fork start method)")
    return Check("CUDA", "ok", f"{count} device(s); mptrain uses spawn for CUDA runs and "
                 "queries devices without initialising CUDA in this process")


def _check_gpu_state_before_fork() -> Check | None:
    """Only from Python (``mptrain doctor`` is a fresh process): after a backward pass or an
    Adam step on a machine with a GPU, workers cannot be forked from this process."""
    unsafe = fork_unsafe_reason()
    if not unsafe:
        return None
    return Check("GPU state before fork", "warn", unsafe,
                 "mptrain starts workers from a fork server (or spawns them) instead")


def _check_thread_env() -> Check:
    threads = os.environ.get("OMP_NUM_THREADS")
    detail = f"torch uses {torch.get_num_threads()} threads" + (
        f", OMP_NUM_THREADS={threads}" if threads else "")
    return Check("threads", "ok", detail + "; mptrain budgets cores // workers per worker")


def _check_leftovers(found: list[leftovers.Leftover], shm_dir: Path) -> Check:
    mine = [item for item in found if item.is_mine]
    others = len(found) - len(mine)
    theirs = f"; {others} of other users (not touched)" if others else ""
    if not mine:
        return Check("leftovers", "ok", f"none of yours from dead runs in {shm_dir}"
                     f"{theirs}")
    size = sum(item.size for item in mine)
    return Check("leftovers", "warn",
                 f"{len(mine)} file(s) or folder(s), {size / 2**20:.1f} MiB, from dead "
                 f"runs{theirs}", "remove them with: mptrain doctor --clean")
