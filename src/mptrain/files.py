"""Writing files so that a crash, a power cut or Ctrl-C never leaves a half-written one
behind: a temp file in the same folder, fsync'd, renamed into place, and the folder fsync'd
so that the rename itself is on disk (checkpoints and every output)."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path
from typing import Callable

from .errors import Interrupted, UserError
from .errors import setting_name as named   # as the caller spelled the setting
from .signals import stop_signals_deferred

#: Temp files are named ``.<final name>.<random>.tmp`` next to the final name
#: (``mptrain doctor --clean --out DIR`` removes those a killed run left).
TEMP_SUFFIX = ".tmp"


def atomic_write(path: Path, write, on_replaced: Callable[[], None] | None = None) -> None:
    """Call ``write(file_object)`` on a temp file next to ``path``, then rename it into place.

    ``on_replaced`` runs right after the rename, with the stop signals deferred across both: a
    stop cannot fall between the file appearing and the caller recording that it did."""
    path = Path(path)
    try:
        fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.",
                                    suffix=TEMP_SUFFIX)
    except OSError as err:
        raise _not_written(path, err) from err
    replaced = False
    try:
        os.fchmod(fd, 0o666 & ~umask())  # mkstemp's 0600 would hide results from others
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        with stop_signals_deferred():
            os.replace(temp, path)
            replaced = True
            fsync_folder(path.parent)
            if on_replaced is not None:
                on_replaced()
    except BaseException as err:
        if replaced:   # the new file is in place: what failed after it is the caller's
            raise
        try:
            os.unlink(temp)
        except FileNotFoundError:
            pass
        stop = behind(err, STOPS)
        if stop is not None and stop is not err:
            raise stop from None   # the file it would have replaced is unchanged
        failed = behind(err, (OSError,))
        if failed is not None:   # a full disk, a quota, a folder gone: one line
            raise _not_written(path, failed) from err
        raise


#: What stops a run: Ctrl-C's KeyboardInterrupt, another signal's ``Interrupted``. Where
#: code catches ``Exception`` (a tracker's failure, a foreign checkpoint), a stop that a
#: cleanup's own error replaced is looked for behind it (:func:`behind`) and raised again.
STOPS = (KeyboardInterrupt, Interrupted)


def behind(err: BaseException, kinds: tuple[type, ...]) -> BaseException | None:
    """The exception of ``kinds`` that ``err`` is or was raised while handling, if any. A
    writer's cleanup can put its own error in the first one's place: torch.save's zip
    writer, its write cut short, raises RuntimeError ("unexpected pos") from its
    ``__exit__`` -- after a stop (Ctrl-C's KeyboardInterrupt, another signal's
    ``Interrupted``) the run ended in that traceback instead of as stopped, and after a
    full disk's OSError in it instead of the one line that says to free space."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, kinds):
            return err
        seen.add(id(err))
        err = err.__context__
    return None


def _not_written(path: Path, err: OSError) -> UserError:
    return UserError(f"could not write {path}: {err.strerror or err}; free space there or "
                     f"choose another {named('out')} (the file it would have replaced is "
                     "unchanged)")


def fsync_folder(folder: Path) -> None:
    """Put a rename or a new name in ``folder`` on disk (a file's fsync does not)."""
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    except OSError as err:
        # Some file systems cannot fsync a folder; the rename stands there regardless.
        if err.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def umask(status: str | Path = "/proc/self/status") -> int:
    """This process's umask, read without changing it: ``os.umask`` can only set it, and
    setting it to read it would, for a moment, give every file another thread creates
    meanwhile the wrong permissions. Linux has said it in /proc since 4.7; elsewhere the
    old way is the only way."""
    try:
        with open(status, encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o077)   # briefly the strictest: nothing made meanwhile is too open
    os.umask(mask)
    return mask


def free_bytes(path) -> int | None:
    """Bytes free for an unprivileged writer on ``path``'s file system (None where it cannot
    be asked): what a run's outputs, spill files or /dev/shm segments may still take."""
    try:
        stats = os.statvfs(path)
    except (OSError, TypeError):
        return None
    return stats.f_bavail * stats.f_frsize


def existing_parent(path) -> Path:
    """The nearest folder of ``path`` that exists: where a folder not made yet will live,
    to ask its file system for room before anything is written."""
    path = Path(path).resolve()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path
