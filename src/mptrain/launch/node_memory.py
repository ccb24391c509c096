"""Shared memory between the ranks torchrun starts on one node.

mptrain's own workers inherit anonymous shared memory from the parent that made it. Ranks
started by torchrun have no common parent of ours, so one of them -- the node's leader,
local rank 0 -- creates each buffer as a file in ``/dev/shm``, the others map the same file
once it is written, and the leader unlinks every file as soon as all of them hold their
mapping. From then on the memory is anonymous again: it goes away with the last process
that maps it, however that process ends, and nothing is left in ``/dev/shm``.

``/dev/shm`` is shared with every user of the machine, so a name must be one nobody else
can take first or point elsewhere: it carries a random token the leader hands its ranks
through the job (``launcher.discover``), the leader creates each file exclusively
(``O_EXCL``, no symbolic link followed, mode 0600), and the others map only a regular file
of their own user with the size they expect. Every rank maps the file it opened (through
``/proc/self/fd``), not whatever the name points to a moment later.

Only the short window between creating and unlinking can leak a file (a rank SIGKILLed in
it). Names also carry the leader's process id, so a later leader on the machine (or
``mptrain doctor --clean``) removes files whose leader is gone.
"""

from __future__ import annotations

import math
import os
import re
import secrets
import stat
from pathlib import Path

import torch

from .. import leftovers

FOLDER = leftovers.SHM_DIR
PREFIX = "mptrain-node-"
# Names of this version (pid, token, count) and of earlier ones (pid, count).
_NAME = re.compile(rf"^{PREFIX}(\d+)-(?:[0-9a-f]+-)?\d+$")
_PROC_FD = Path("/proc/self/fd")


def new_token() -> str:
    """A name part nobody can guess (128 bits)."""
    return secrets.token_hex(16)


class NodeMemory:
    """Buffers of one node, mapped by name in the same order by every rank of it.

    The leader calls :meth:`allocate` for everything first; after a barrier of the whole
    job the other ranks call it with the same shapes in the same order (they get the
    leader's buffers, already written); after a second barrier the leader calls
    :meth:`unlink_all`. ``token`` is the leader's (:func:`new_token`), the same on every
    rank of the node.
    """

    def __init__(self, leader_pid: int, is_leader: bool, token: str, folder: Path = FOLDER):
        if not re.fullmatch(r"[0-9a-f]{16,}", token):
            raise ValueError(f"node memory token {token!r} is not a random hex string")
        self.is_leader = is_leader
        self._folder = Path(folder)
        self._prefix = f"{PREFIX}{leader_pid}-{token}-"
        self._count = 0
        self._created: list[Path] = []
        if is_leader:
            remove_orphans(self._folder)

    def allocate(self, *shape: int) -> torch.Tensor:
        """A uint8 tensor of ``shape``: zeroed when the leader creates it, the leader's
        contents for the others."""
        path = self._folder / f"{self._prefix}{self._count}"
        self._count += 1
        nbytes = max(1, math.prod(shape))
        fd = self._create(path, nbytes) if self.is_leader else self._open(path, nbytes)
        try:
            mapped = torch.from_file(_mappable(path, fd), shared=True, size=nbytes,
                                     dtype=torch.uint8)
        finally:
            os.close(fd)   # the mapping keeps the memory
        return mapped.view(*shape)

    def _create(self, path: Path, nbytes: int) -> int:
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(path, flags, 0o600)
        except FileExistsError:
            raise RuntimeError(f"{path} exists already: another process took this node's "
                               "random buffer name; not using it") from None
        self._created.append(path)   # unlink_all removes it, whatever happens next
        try:
            os.ftruncate(fd, nbytes)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _open(self, path: Path, nbytes: int) -> int:
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            raise RuntimeError(f"{path} is missing: the node's leader did not create it "
                               "(it stopped, or allocated in another order)") from None
        except OSError as err:   # ELOOP: a symbolic link in its place
            raise RuntimeError(f"{path} cannot be opened as the leader's buffer "
                               f"({err.strerror})") from None
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != leftovers.current_uid() \
                or info.st_size != nbytes:
            os.close(fd)
            raise RuntimeError(f"{path} is not the node leader's buffer (owner uid "
                               f"{info.st_uid}, {info.st_size} bytes; expected uid "
                               f"{leftovers.current_uid()}, {nbytes} bytes)")
        return fd

    def unlink_all(self) -> None:
        """Remove the names; the mappings stay valid (leader only, once every rank mapped)."""
        for path in self._created:
            path.unlink(missing_ok=True)
        self._created.clear()


def _mappable(path: Path, fd: int) -> str:
    """A name that opens the file behind ``fd`` (torch maps by name) whatever is at
    ``path`` by now."""
    return str(_PROC_FD / str(fd)) if _PROC_FD.is_dir() else str(path)


def remove_orphans(folder: Path = FOLDER) -> leftovers.Cleanup:
    """Remove this user's node buffers whose leader process is gone (others' stay)."""
    return leftovers.clean(leftovers.find_segments(folder, _NAME))
