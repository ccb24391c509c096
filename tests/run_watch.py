"""Helpers for watching real runs from outside, shared by the fault and stress tests and by
benchmarks/faults.py: what is in /dev/shm, and bounded waits for a condition."""

import os
import time

SHM_DIR = "/dev/shm"


def shm_entries() -> set[str]:
    try:
        return set(os.listdir(SHM_DIR))
    except FileNotFoundError:
        return set()


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
