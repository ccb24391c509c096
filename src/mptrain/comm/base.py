"""The collective operations strategies need, and nothing more."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Callable, Sequence

import torch

#: A row block for :meth:`Group.gather_rows`' ``receive``: the first row's place among the
#: ranks' rows (in rank order), and the rows.
Receive = Callable[[int, torch.Tensor], None]


class CollectiveTimeout(RuntimeError):
    """A peer did not arrive at a collective within the run's worker timeout."""


class Group(ABC):
    rank: int
    world_size: int

    @abstractmethod
    def barrier(self) -> None:
        """Return once every rank has called it."""

    @abstractmethod
    def average_(self, tensors: Sequence[torch.Tensor]) -> None:
        """Replace every tensor by its mean over ranks; the result is bitwise equal on all ranks."""

    @abstractmethod
    def broadcast_(self, tensors: Sequence[torch.Tensor], src: int = 0) -> None:
        """Overwrite every tensor with rank ``src``'s values."""

    def weighted_average_(self, tensors: Sequence[torch.Tensor], weight: float) -> float:
        """Replace every tensor by ``sum_r weight_r * tensor_r / sum_r weight_r`` over ranks
        and return ``sum_r weight_r``; a rank with weight 0 contributes nothing (FedAvg with
        client sample counts as weights).

        Built on :meth:`average_` (the mean of ``weight * tensor`` over the mean of
        ``weight``), so every implementation has it; if every weight is 0 the tensors are
        left as they are.
        """
        scaled = [t.detach() * weight for t in tensors]
        total = torch.tensor([float(weight)], dtype=scaled[0].dtype if scaled else None)
        self.average_(scaled + [total])
        if total.item() <= 0:
            return 0.0
        for tensor, summed in zip(tensors, scaled):
            tensor.detach().copy_(summed / total)
        return total.item() * self.world_size

    def collective_bytes(self) -> int | None:
        """The most bytes one collective carries (None: as many as memory holds)."""
        return None

    def gather_rows(self, rows: torch.Tensor, counts: Sequence[int],
                    receive: Receive | None = None) -> int:
        """Every rank's ``rows`` (``[counts[rank], width]``: one dtype and width on every
        rank) at rank 0, handed to its ``receive(first, block)`` a block of rows at a time,
        ``first`` counting the ranks' rows in rank order (rank 0's own come back to it, if
        it gives any). Every rank gives the same ``counts``. Returns the collectives it
        took.

        Built on :meth:`broadcast_`, so every group has it: a broadcast per rank that has
        rows, in blocks of at most :meth:`collective_bytes`; every rank receives each block
        (traffic, and one block of memory, never the whole). Groups over torch.distributed
        gather instead, in one collective until the rows pass 64 MiB."""
        width, firsts = rows.shape[1], row_starts(counts)
        most = self.collective_bytes()
        per_block = counts_per_block(width * rows.element_size(), most)
        scratch = torch.empty(min(per_block, max(counts, default=0)), width,
                              dtype=rows.dtype)
        calls = 0
        for rank, count in enumerate(counts):
            for start in range(0, count, per_block):
                end = min(count, start + per_block)
                block = rows[start:end] if self.rank == rank else scratch[:end - start]
                if rank != 0:    # rank 0's own rows need no collective
                    self.broadcast_([block], src=rank)
                    calls += 1
                if self.rank == 0 and receive is not None:
                    receive(firsts[rank] + start, block)
        return calls

    def close(self) -> None:
        """Release what the group holds in this process."""


def counts_per_block(row_bytes: int, most: int | None) -> int:
    """Rows of ``row_bytes`` that one collective of at most ``most`` bytes carries (at
    least one: a group always carries what its strategy sized it for, one model)."""
    if most is None:
        return 1 << 62
    return max(1, most // max(1, row_bytes))


def row_starts(counts: Sequence[int]) -> list[int]:
    """Where each rank's rows start among all the ranks' rows."""
    firsts, total = [], 0
    for count in counts:
        firsts.append(total)
        total += count
    return firsts
