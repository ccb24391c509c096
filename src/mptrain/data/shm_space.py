"""How much ``/dev/shm`` has free, and the refusal, with its fix, of a run that would not fit.

Shared memory that runs out does not fail an allocation: a worker touching a page past the
end dies of SIGBUS. So whoever is about to put bytes there -- the run's plan, a natural data
set being read, ``--loader auto`` choosing between stacking and streaming -- asks here first.
"""

from __future__ import annotations

import math
import os

from ..errors import UserError

SHM_PATH = "/dev/shm"


def check_shm_space(nbytes: int, path: str = SHM_PATH, what: str = "the run",
                    other_fix: str | None = None) -> None:
    """Refuse now, with the fix, rather than die of SIGBUS when /dev/shm runs out later
    (``what``: who needs it, ``the run`` or the data being read; ``other_fix``: one that
    needs no more of it, said last)."""
    free = shm_free_bytes(path)
    if free is None:
        return  # no /dev/shm (not Linux): torch uses other mechanisms
    if nbytes > free:
        raise UserError(
            f"{what} needs {nbytes / 2**20:,.0f} MiB of shared memory but {path} has only "
            f"{free / 2**20:,.0f} MiB free; free space there, or in Docker start the "
            f"container with a larger --shm-size (e.g. --shm-size={_suggest_size(nbytes)})"
            + (f", or {other_fix}" if other_fix else ""))


#: A documented synthetic limit for benchmarks and tests: pretend ``/dev/shm`` has this many
#: MiB free (``benchmarks/data_pipeline.py``'s stream part: data twice that size).
SHM_FREE_MIB_VARIABLE = "MPTRAIN_SHM_FREE_MIB"


def shm_free_bytes(path: str = SHM_PATH) -> int | None:
    """The bytes free in ``path`` (None where there is none), or the synthetic limit
    ``MPTRAIN_SHM_FREE_MIB`` where it is set and smaller."""
    try:
        stats = os.statvfs(path)
    except OSError:
        return None
    free = stats.f_bavail * stats.f_frsize
    pretend = os.environ.get(SHM_FREE_MIB_VARIABLE)
    if pretend:
        try:
            mib = float(pretend)
        except ValueError:
            mib = math.nan
        if not 0 <= mib < math.inf:   # nan, inf and below 0 too: no size
            raise UserError(f"{SHM_FREE_MIB_VARIABLE} must be a non-negative number of "
                            f"MiB, got {pretend!r}")
        free = min(free, int(mib * 2**20))
    return free


def _suggest_size(nbytes: int) -> str:
    gib = max(1, -(-int(nbytes * 1.5) // 2**30))
    return f"{gib}g"
