"""Shared memory between the ranks torchrun starts on one node.

mptrain's own workers inherit anonymous shared memory from the parent that made it. Ranks
started by torchrun have no common parent of ours, so one of them -- the node's leader,
local rank 0 -- creates each buffer as a file in ``/dev/shm``, the others map the same file
once it is written, and the leader unlinks every file as soon as all of them hold their
mapping. From then on the memory is anonymous again: it goes away with the last process
that maps it, however that process ends, and nothing is left in ``/dev/shm``.

Only the short window between creating and unlinking can leak a file (a rank SIGKILLed in
it). File names carry the leader's process id, so the next leader on the machine removes
files whose leader is gone before it creates its own.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import torch

FOLDER = Path("/dev/shm")
PREFIX = "mptrain-node-"
_NAME = re.compile(rf"^{PREFIX}(\d+)-\d+$")


class NodeMemory:
    """Buffers of one node, mapped by name in the same order by every rank of it.

    The leader calls :meth:`allocate` for everything first; after a barrier of the whole
    job the other ranks call it with the same shapes in the same order (they get the
    leader's buffers, already written); after a second barrier the leader calls
    :meth:`unlink_all`.
    """

    def __init__(self, leader_pid: int, is_leader: bool, folder: Path = FOLDER):
        self.is_leader = is_leader
        self._folder = Path(folder)
        self._prefix = f"{PREFIX}{leader_pid}-"
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
        if self.is_leader:
            path.unlink(missing_ok=True)
            self._created.append(path)
        elif not path.exists():
            raise RuntimeError(f"{path} is missing: the node's leader did not create it "
                               "(it stopped, or allocated in another order)")
        mapped = torch.from_file(str(path), shared=True, size=nbytes, dtype=torch.uint8)
        return mapped.view(*shape)

    def unlink_all(self) -> None:
        """Remove the names; the mappings stay valid (leader only, once every rank mapped)."""
        for path in self._created:
            path.unlink(missing_ok=True)
        self._created.clear()


def remove_orphans(folder: Path = FOLDER) -> None:
    """Remove node buffers whose leader process no longer exists."""
    from ..doctor import clean_leftovers, find_leftovers

    clean_leftovers(find_leftovers(folder, _NAME))
