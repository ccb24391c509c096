"""Writing files so that a crash or Ctrl-C never leaves a half-written one behind: a temp
file in the same folder, fsync'd, then renamed into place (checkpoints and every output)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable

from .launch.lifecycle import stop_signals_deferred


def atomic_write(path: Path, write, on_replaced: Callable[[], None] | None = None) -> None:
    """Call ``write(file_object)`` on a temp file next to ``path``, then rename it into place.

    ``on_replaced`` runs right after the rename, with SIGINT/SIGTERM deferred across both: a
    stop cannot fall between the file appearing and the caller recording that it did."""
    path = Path(path)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 would hide results from others
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        with stop_signals_deferred():
            os.replace(temp, path)
            if on_replaced is not None:
                on_replaced()
    except BaseException:
        try:
            os.unlink(temp)
        except FileNotFoundError:
            pass
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
