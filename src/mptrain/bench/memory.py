"""Peak memory of a whole process tree, sampled from outside it."""

from __future__ import annotations

import threading

import psutil

from ..background import quietly


class TreeMemorySampler(threading.Thread):
    """Peak RSS and PSS summed over a process and all its descendants.

    RSS counts a shared page once per process that maps it, so N workers over one shared
    data set look N times as big; PSS charges each shared page in equal parts to the
    processes sharing it, so the sum over the tree counts the data set once.
    """

    def __init__(self, pid: int, interval_s: float = 0.2):
        super().__init__(daemon=True)
        self.pid, self.interval_s = pid, interval_s
        self.peak_rss = self.peak_pss = 0
        self.peak_processes = 0
        self._stop_event = threading.Event()

    def run(self):
        # Quiet (``background``): a tree that cannot be read any more (a process that changed
        # hands, the interpreter shutting down under a sampler left running) ends the
        # sampling, and the peaks seen so far stand.
        quietly(self._sample)()

    def _sample(self):
        try:
            root = psutil.Process(self.pid)
        except psutil.NoSuchProcess:
            return
        while not self._stop_event.is_set():
            try:
                processes = [root] + root.children(recursive=True)
            except psutil.NoSuchProcess:
                break
            rss = pss = 0
            for process in processes:
                sizes = _rss_pss(process)
                if sizes is not None:
                    rss += sizes[0]
                    pss += sizes[1]
            self.peak_rss = max(self.peak_rss, rss)
            self.peak_pss = max(self.peak_pss, pss)
            self.peak_processes = max(self.peak_processes, len(processes))
            self._stop_event.wait(self.interval_s)

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


def _rss_pss(process: psutil.Process) -> tuple[int, int] | None:
    """RSS and PSS in bytes. /proc/PID/smaps_rollup is read directly: psutil's
    memory_full_info() parses the full smaps, which cost a fifth of a core at 20 Hz and
    slowed the very runs being measured."""
    try:
        with open(f"/proc/{process.pid}/smaps_rollup") as handle:
            fields = dict(line.split(":", 1) for line in handle if ":" in line)
        return (int(fields["Rss"].split()[0]) * 1024, int(fields["Pss"].split()[0]) * 1024)
    except (OSError, KeyError, ValueError):
        pass
    try:
        info = process.memory_full_info()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None
    return info.rss, getattr(info, "pss", info.rss)
