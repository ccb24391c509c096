"""``mptrain doctor``: check the machine for the usual multi-process training traps, and find
(and with ``--clean`` remove) shared-memory segments left behind by dead runs.

torch's ``file_system`` sharing strategy names its segments ``/dev/shm/torch_<pid>_...``,
after the process that created them; torch_shm_manager unlinks them when the last user is
gone, but not when the manager itself was SIGKILLed. A segment whose creator pid is no
longer alive is a leftover; one whose creator lives is in use and is never touched.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import resource
from dataclasses import dataclass
from pathlib import Path

import psutil
import torch

SHM_DIR = Path("/dev/shm")
#: Segments named after the process that created them: torch's (file_system sharing) and
#: the node buffers of torchrun's ranks (``launch.node_memory``).
_TORCH_SEGMENT = re.compile(r"^(?:torch_|mptrain-node-)(\d+)[_-]")
MIN_SHM_BYTES = 1 << 30
MIN_OPEN_FILES = 4096


@dataclass(frozen=True)
class Check:
    name: str
    status: str     # "ok", "warn", "fail"
    detail: str
    advice: str = ""


@dataclass(frozen=True)
class Leftover:
    path: Path
    pid: int
    size: int


def find_leftovers(shm_dir: Path = SHM_DIR, pattern: re.Pattern = _TORCH_SEGMENT
                   ) -> list[Leftover]:
    """Segments in ``shm_dir`` (matching ``pattern``, whose group 1 is the creator's pid)
    whose creating process is gone."""
    leftovers = []
    try:
        entries = list(shm_dir.iterdir())
    except OSError:
        return []
    for entry in entries:
        match = pattern.match(entry.name)
        if match is None or psutil.pid_exists(int(match.group(1))):
            continue
        try:
            size = entry.stat().st_size
        except FileNotFoundError:
            continue
        leftovers.append(Leftover(entry, int(match.group(1)), size))
    return sorted(leftovers, key=lambda item: item.path.name)


def clean_leftovers(leftovers: list[Leftover]) -> tuple[int, int]:
    """Remove the given leftovers; return (files removed, bytes freed)."""
    removed = freed = 0
    for leftover in leftovers:
        if psutil.pid_exists(leftover.pid):  # re-check: a pid may have been reused since
            continue
        try:
            leftover.path.unlink()
        except FileNotFoundError:
            continue
        removed += 1
        freed += leftover.size
    return removed, freed


def run_checks(shm_dir: Path = SHM_DIR) -> list[Check]:
    return [_check_shm(shm_dir), _check_open_files(), _check_start_methods(), _check_cuda(),
            _check_thread_env(), _check_leftovers(shm_dir)]


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


def _check_thread_env() -> Check:
    threads = os.environ.get("OMP_NUM_THREADS")
    detail = f"torch uses {torch.get_num_threads()} threads" + (
        f", OMP_NUM_THREADS={threads}" if threads else "")
    return Check("threads", "ok", detail + "; mptrain budgets cores // workers per worker")


def _check_leftovers(shm_dir: Path) -> Check:
    leftovers = find_leftovers(shm_dir)
    if not leftovers:
        return Check("leftover segments", "ok", f"none from dead runs in {shm_dir}")
    size = sum(item.size for item in leftovers)
    return Check("leftover segments", "warn",
                 f"{len(leftovers)} segment(s), {size / 2**20:.1f} MiB, from dead processes",
                 "remove them with: mptrain doctor --clean")
