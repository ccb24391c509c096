"""Every client's personal tensors, one row of floats per client: :class:`PersonalStore`.

Thousands of clients' personal state does not fit in memory as whole models (10,000 Ditto
clients of the 2NN: 7.4 GiB). The first rows, as many as the budget holds
(``--personal-memory``), live in shared memory; the rest in a file under ``--out`` that
every process maps ``MAP_SHARED`` (a write of one process is seen by all; the page cache
keeps what fits, the disk the rest). The file is made whole under a temporary name and
renamed into place, so a crash never leaves a half-made one. A row is written only by the
worker that trains its client in a round and read by others only after the round's
barriers (``strategies.fedavg.personal_trainer``); ``touched`` says which clients have a
row at all (the others start from the global model).

A checkpoint holds the touched rows (``state``), so a resume continues bitwise.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from ...leftovers import PERSONAL_STATE_FILE

#: Where the rows beyond the memory budget go (under --out).
STORE_FILE = PERSONAL_STATE_FILE
FLOAT_BYTES = 4


@dataclass(frozen=True)
class StorePlacement:
    """How many rows go in memory and how many in the file, and their bytes."""

    clients: int
    width: int          # floats per client
    memory_rows: int

    @property
    def disk_rows(self) -> int:
        return self.clients - self.memory_rows

    @property
    def row_bytes(self) -> int:
        return self.width * FLOAT_BYTES

    @property
    def memory_bytes(self) -> int:
        return self.memory_rows * self.row_bytes

    @property
    def disk_bytes(self) -> int:
        return self.disk_rows * self.row_bytes


def place_rows(clients: int, width: int, budget_bytes: int) -> StorePlacement:
    """As many rows in memory as ``budget_bytes`` holds, the rest on disk."""
    row = max(1, width * FLOAT_BYTES)
    return StorePlacement(clients, width, min(clients, max(0, budget_bytes) // row))


class PersonalStore:
    """``clients`` rows of ``width`` floats: in shared memory up to ``memory_rows``, the
    rest in the file at ``path`` (see the module's docstring). Pickles to a worker as its
    shared tensors and the path; each process maps the file once, at its first use."""

    def __init__(self, placement: StorePlacement, path: Path | None, shared: bool = True):
        from ...data.shared import shared_zeros

        self.placement = placement
        make = shared_zeros if shared else (lambda shape, dtype=torch.float32:
                                            torch.zeros(shape, dtype=dtype))
        self.memory = make((placement.memory_rows, placement.width))
        self.touched = make((placement.clients,), dtype=torch.uint8)
        self.path = Path(path) if path is not None else None
        if placement.disk_rows and self.path is None:
            raise ValueError("rows beyond the memory budget need a file")
        if placement.disk_rows:
            _create_whole(self.path, placement.disk_bytes)
        self._mapped: torch.Tensor | None = None

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_mapped"] = None   # a mapping is per process: the path travels, not the pages
        return state

    def _disk(self) -> torch.Tensor:
        if self._mapped is None:
            p = self.placement
            self._mapped = torch.from_file(str(self.path), shared=True,
                                           size=p.disk_rows * p.width,
                                           dtype=torch.float32).view(p.disk_rows, p.width)
        return self._mapped

    def row(self, client: int) -> torch.Tensor:
        """Client ``client``'s row, a view to read or write in place."""
        memory_rows = self.placement.memory_rows
        if client < memory_rows:
            return self.memory[client]
        return self._disk()[client - memory_rows]

    def has(self, client: int) -> bool:
        return bool(self.touched[client])

    def put(self, client: int, flat: torch.Tensor) -> None:
        self.row(client).copy_(flat)
        self.touched[client] = 1

    # -- a checkpoint's part -------------------------------------------------------------------
    def state(self) -> dict:
        """The touched clients and their rows (copies)."""
        clients = torch.nonzero(self.touched).flatten()
        rows = torch.stack([self.row(int(c)).clone() for c in clients]) if len(clients) \
            else torch.zeros(0, self.placement.width)
        return {"clients": clients, "rows": rows}

    def load_state(self, state: dict) -> None:
        """Put a checkpoint's rows back; rows of another width (a resume that changed
        --personalize) are refused, not cut."""
        width = state["rows"].shape[1] if state["rows"].dim() == 2 else None
        if len(state["clients"]) and width != self.placement.width:
            raise ValueError(f"the checkpoint's personal state has {width} floats a client "
                             f"and this run's {self.placement.width}: resume with the "
                             "--personalize it was saved with")
        for client, row in zip(state["clients"].tolist(), state["rows"]):
            self.put(client, row)


def _create_whole(path: Path, size: int) -> None:
    """A sparse file of ``size`` zero bytes at ``path``, renamed into place once whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with open(partial, "wb") as handle:
        handle.truncate(size)
    os.replace(partial, path)
