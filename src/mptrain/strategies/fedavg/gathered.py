"""The round's table where the ranks share no memory (torchrun), for a robust rule or an
attack (issue 41): every client's update is needed at once, so the rows are gathered to
rank 0, which alone holds the whole table and applies the rule exactly as the
single-machine server does (``RobustWorker.aggregate`` over every column); the aggregate
goes back to every rank through the group, and every rank steps its own copy of the server
optimizer on the same bits -- so the ranks' models stay bitwise equal, and equal to the
single-machine run's (the rule's sums run over the same fixed blocks in the same client
order whoever computes them).

The gather is the group's (``Group.gather_rows``): torchrun's groups gather every rank's
rows to rank 0 in one gloo collective a round (more only past 64 MiB at rank 0), where
they had a broadcast per row; other groups broadcast a block of rows at a time. Each row
carries its weight in two extra columns (the float64's bits as two float32s: copied, never
computed with, so exact), so the weights need no collective of their own.

Memory: rank 0 holds the table, ``rows x numel`` floats, made once; every other rank holds
only its own clients' rows (made each round, dropped after the gather); the gather holds a
block of rows on every rank and one more per rank on rank 0, at most 64 MiB there
(``comm.dist.GATHER_BYTES``). The banner and the 1 GiB refusal count rank 0's table, the
refusal on rank 0's machine the rest too (``refusals.gathered_memory_refusal``). No
shared state: everything here is private to its rank.
"""

from __future__ import annotations

from typing import Sequence

import torch

#: The columns after a gathered row's numbers that carry its weight: the float64's bits as
#: two float32s.
WEIGHT_COLUMNS = 2


class GatheredTable:
    """One rank's side of the gathered table: the rows of the clients it trains this
    round, and on rank 0 the whole table they are gathered into."""

    def __init__(self, rank: int, rows: int, numel: int):
        self.rank, self.numel = rank, numel
        #: Rank 0's table of the round (None elsewhere): a row per slot of the sample.
        self.table = torch.zeros(rows, numel) if rank == 0 else None
        #: Each slot's weight (0: no report); on rank 0 every slot's after ``gather``,
        #: elsewhere this rank's own.
        self.weights = torch.zeros(rows, dtype=torch.float64)
        self._rows: dict[int, torch.Tensor] = {}
        self._block: torch.Tensor | None = None   # this round's rows and weights (rank > 0)

    def start_round(self, slots: Sequence[int]) -> None:
        """Rows for this rank's clients of the round (their ``slots``, in slot order); on
        rank 0 they are the table's own rows, so its clients need no gathering."""
        self.weights.zero_()
        if self.rank == 0:
            self._rows = {slot: self.table[slot] for slot in slots}
        else:
            self._block = torch.empty(len(slots), self.numel + WEIGHT_COLUMNS)
            self._rows = {slot: self._block[i, :self.numel] for i, slot in enumerate(slots)}

    def row(self, slot: int) -> torch.Tensor:
        """Where the client of ``slot`` (one of this rank's) puts what it sends."""
        return self._rows[slot]

    def gather(self, group, owners: Sequence[int]) -> int:
        """Every slot's row and weight into rank 0's table (``owners[slot]``: the rank that
        trained it). Every rank calls this with the same ``owners`` (the gather is a
        collective). Returns the collectives it took."""
        slots_of = [[slot for slot, owner in enumerate(owners) if owner == rank]
                    for rank in range(group.world_size)]
        counts = [0] + [len(slots) for slots in slots_of[1:]]   # rank 0's rows are in place
        if self.rank == 0:
            rows = torch.empty(0, self.numel + WEIGHT_COLUMNS)
        else:
            rows = self._block
            weights = torch.tensor([float(self.weights[slot]) for slot in slots_of[self.rank]],
                                   dtype=torch.float64)
            rows[:, self.numel:] = weights.view(torch.float32).view(-1, WEIGHT_COLUMNS)
        order = [slot for slots in slots_of[1:] for slot in slots]   # the rows' slots

        def receive(first: int, block: torch.Tensor) -> None:
            slots = torch.tensor(order[first:first + len(block)], dtype=torch.int64)
            self.table.index_copy_(0, slots, block[:, :self.numel])
            self.weights[slots] = block[:, self.numel:].contiguous().view(torch.float64) \
                .reshape(-1)

        calls = group.gather_rows(rows, counts, receive if self.rank == 0 else None)
        self._rows, self._block = {}, None   # this round's rows are rank 0's now
        return calls


def slot_owners(sampled: Sequence[int], assignment: Sequence[Sequence[int]]) -> list[int]:
    """The rank that trains each slot's client (``assignment``: ``assign_clients``'s)."""
    rank_of = {client: rank for rank, clients in enumerate(assignment) for client in clients}
    return [rank_of[client] for client in sampled]
