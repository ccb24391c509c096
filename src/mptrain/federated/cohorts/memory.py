"""How many clients a cohort may hold: the memory one worker's cohorts may take on its
device (a share of a GPU's free memory, or of the host's available memory, capped), and the
cohort size that fits, from one client's bytes (``check``'s dry run)."""

from __future__ import annotations

import os

import torch

#: Of the memory still free on a GPU, what one worker's cohorts may take, divided among
#: the ranks sharing the GPU (the rest: the data set's resident copy, the allocator's
#: slack, other processes).
GPU_SHARE = 0.5
#: On CPU: of the memory available (MemAvailable), what one worker's cohorts may take,
#: divided among the workers; and a cap, since beyond a few hundred MiB a larger cohort is
#: no faster on a CPU (its kernels are already large) but pages other work out.
CPU_SHARE, CPU_CAP_BYTES = 0.25, 1 << 30


def memory_budget(device: torch.device, sharers: int = 1) -> int:
    """Bytes one worker's cohorts may take on ``device``: a share of the GPU's free
    memory, or of the host's available memory (capped), divided among ``sharers``."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free * GPU_SHARE / max(1, sharers))
    return int(min(_available_host_bytes() * CPU_SHARE / max(1, sharers), CPU_CAP_BYTES))


def _available_host_bytes() -> int:
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def cohort_size(client_bytes: int, budget_bytes: int, forced: int | None = None) -> int:
    """Clients per cohort: ``forced`` (``--vectorize-chunk``) when given, else as many
    as ``budget_bytes`` holds, at least one."""
    if forced is not None:
        return forced
    return max(1, budget_bytes // max(1, client_bytes))
