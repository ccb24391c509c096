"""Writing files so that a crash or Ctrl-C never leaves a half-written one behind: a temp
file in the same folder, fsync'd, then renamed into place (checkpoints and every output)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write(path: Path, write) -> None:
    """Call ``write(file_object)`` on a temp file next to ``path``, then rename it into place."""
    path = Path(path)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 would hide results from others
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
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
