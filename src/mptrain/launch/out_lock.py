"""One run at a time per --out folder.

Two runs writing one folder would each replace the other's checkpoint, metrics and model
file by file (every write is atomic, the set of them is not), leaving a folder whose files
come from different runs and a checkpoint that resumes neither. So a run holds an
exclusive ``flock`` on ``--out/.mptrain.lock`` from before its first write to after its
last, and a second run into the same folder is refused in one line naming the first.

The kernel drops the lock when its holder's last descriptor closes, so a run killed with
SIGKILL holds nothing: its lock file stays behind, empty of meaning, and the next run takes
it. Forked workers inherit the descriptor: while any of them lives, the folder stays taken.
"""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from ..errors import UserError
from ..errors import setting_name as named   # as the caller spelled the setting

LOCK_NAME = ".mptrain.lock"
#: Tries when the holder removes the file between our open and our lock (see _acquire).
_TRIES = 20


@contextmanager
def out_dir_held(out_dir: Path | None) -> Iterator[None]:
    """Hold ``out_dir`` for one run (nothing to hold when None); refuse one already held."""
    if out_dir is None:
        yield
        return
    path = Path(out_dir) / LOCK_NAME
    fd = _acquire(path, out_dir)
    try:
        yield
    finally:
        if fd is not None:
            _release(path, fd)


def _acquire(path: Path, out_dir: Path) -> int | None:
    for _ in range(_TRIES):
        try:   # never through a symbolic link planted at the name
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise UserError(f"{named('out')} {out_dir} is being written by another mptrain "
                            f"run{holder}; wait for it to end or choose another "
                            f"{named('out')}") from None
        except OSError:        # a file system without locks (some NFS mounts): unguarded
            os.close(fd)
            return None
        # The holder we waited on may have removed the file between our open and our lock
        # (it unlinks before it lets go): then we hold a file nobody else can find, and a
        # third run could create and lock a new one. Hold only the file at the path.
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            return fd
        os.close(fd)
    return None


def _release(path: Path, fd: int) -> None:
    # Unlink while still holding: whoever opens the path afterwards creates a new file, and
    # whoever opened the old one before finds it gone once it gets the lock.
    try:
        path.unlink()
    except OSError:
        pass
    os.close(fd)


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""
    return f" (pid {text})" if text.isdigit() else ""
