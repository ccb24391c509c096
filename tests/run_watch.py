"""Helpers for watching real runs from outside, shared by the fault and stress tests and by
benchmarks/faults.py: what is in /dev/shm, and bounded waits for a condition."""

import os
import re
import time

SHM_DIR = "/dev/shm"

# torch names its segments torch_<pid>_..., mptrain's node memory mptrain-node-<pid>-...:
# the pid of the process that created them.
_CREATOR = re.compile(r"^(?:torch_|mptrain-node-)(\d+)[_-]")


def shm_entries() -> set[str]:
    """What is in /dev/shm, less what provably belongs to a run beside this process's.

    The suite runs two tests at a time (pytest-xdist): a segment whose creator is alive in
    the other test's process tree -- it descends from this process's parent, not from this
    process -- is that test's, not a leak of this one. A segment whose creator is gone, or
    is an orphan of this process's runs, stays counted.
    """
    try:
        names = set(os.listdir(SHM_DIR))
    except FileNotFoundError:
        return set()
    return {name for name in names if not _a_neighbours(name)}


def creator(name: str) -> int | None:
    """The pid of the process that created a segment, where its name says."""
    match = _CREATOR.match(name)
    return None if match is None else int(match[1])


def _a_neighbours(name: str) -> bool:
    import psutil

    pid = creator(name)
    if pid is None or pid == os.getpid():
        return False
    try:
        ancestors = {p.pid for p in psutil.Process(pid).parents()}
    except psutil.Error:
        return False   # gone: whatever it left is a leftover
    return os.getpid() not in ancestors and os.getppid() in ancestors


def poll(condition, timeout: float, interval: float = 0.02):
    """Return condition()'s first truthy value, or None when ``timeout`` passes first.

    A bounded check of a condition, not a sleep standing in for synchronisation.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            return value or None
        time.sleep(interval)


def live_children() -> list:
    """This process's children, zombies included, except multiprocessing's own long-lived
    helpers (the resource tracker and fork server that earlier tests may have started)."""
    import psutil

    left = []
    for child in psutil.Process().children(recursive=True):
        try:
            cmdline = " ".join(child.cmdline())
            if "resource_tracker" in cmdline or "forkserver" in cmdline:
                continue
            left.append((child.pid, child.status(), cmdline))
        except psutil.NoSuchProcess:
            pass
    return left
