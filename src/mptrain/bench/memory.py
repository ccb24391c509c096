"""Peak memory of a whole process tree, sampled from outside it."""

from __future__ import annotations

import threading

import psutil


class TreeMemorySampler(threading.Thread):
    """Peak RSS and PSS summed over a process and all its descendants.

    RSS counts a shared page once per process that maps it, so N workers over one shared
    data set look N times as big; PSS charges each shared page in equal parts to the
    processes sharing it, so the sum over the tree counts the data set once.
    """

    def __init__(self, pid: int, interval_s: float = 0.05):
        super().__init__(daemon=True)
        self.pid, self.interval_s = pid, interval_s
        self.peak_rss = self.peak_pss = 0
        self.peak_processes = 0
        self._stop_event = threading.Event()

    def run(self):
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
                try:
                    info = process.memory_full_info()
                except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                    continue
                rss += info.rss
                pss += getattr(info, "pss", info.rss)
            self.peak_rss = max(self.peak_rss, rss)
            self.peak_pss = max(self.peak_pss, pss)
            self.peak_processes = max(self.peak_processes, len(processes))
            self._stop_event.wait(self.interval_s)

    def stop(self) -> None:
        self._stop_event.set()
        self.join()
