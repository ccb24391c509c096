"""The round's table where the ranks share no memory (torchrun), for a robust rule or an
attack (issue 41): every client's update is needed at once, so the rows are gathered to
rank 0, which alone holds the whole table and applies the rule exactly as the
single-machine server does (``RobustServer.aggregate`` over every column); the aggregate
goes back to every rank through the group, and every rank steps its own copy of the server
optimizer on the same bits -- so the ranks' models stay bitwise equal, and equal to the
single-machine run's (the rule's sums run over the same fixed blocks in the same client
order whoever computes them).

Memory: rank 0 holds the table, ``rows x numel`` floats, made once; every other rank holds
only its own clients' rows (made each round, dropped after the gather) and one row to
receive into. The banner and the 1 GiB refusal count rank 0's table.

The gather goes through the run's group (shared memory within a node, gloo between the
node leaders): each rank's weights in one broadcast, then each row from the rank that
trained it. The group has no gather; a broadcast reaches rank 0 on any layout of nodes, and
the ranks it also reaches copy each row into their one scratch row and drop it (traffic,
never memory). No shared state: everything here is private to its rank.
"""

from __future__ import annotations

from typing import Sequence

import torch


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
        self._scratch: torch.Tensor | None = None

    def start_round(self, slots: Sequence[int]) -> None:
        """Rows for this rank's clients of the round (their ``slots``); on rank 0 they are
        the table's own rows, so its clients need no gathering."""
        self.weights.zero_()
        if self.rank == 0:
            self._rows = {slot: self.table[slot] for slot in slots}
        else:
            mine = torch.empty(len(slots), self.numel)
            self._rows = {slot: mine[i] for i, slot in enumerate(slots)}

    def row(self, slot: int) -> torch.Tensor:
        """Where the client of ``slot`` (one of this rank's) puts what it sends."""
        return self._rows[slot]

    def gather(self, group, owners: Sequence[int]) -> None:
        """Every slot's row and weight into rank 0's table (``owners[slot]``: the rank that
        trained it). Every rank calls this with the same ``owners``: the broadcasts are
        collectives, made in the same order everywhere."""
        senders = sorted({owner for owner in owners if owner != 0})
        for sender in senders:
            weights = self.weights.clone()
            group.broadcast_([weights], src=sender)
            if self.rank == 0:
                for slot, owner in enumerate(owners):
                    if owner == sender:
                        self.weights[slot] = weights[slot]
        for slot, owner in enumerate(owners):
            if owner == 0:
                continue
            group.broadcast_([self._destination(slot, owner)], src=owner)
        self._rows = {}   # this round's rows are rank 0's now

    def _destination(self, slot: int, owner: int) -> torch.Tensor:
        if self.rank == owner:
            return self._rows[slot]
        if self.rank == 0:
            return self.table[slot]
        if self._scratch is None:
            self._scratch = torch.empty(self.numel)
        return self._scratch


def slot_owners(sampled: Sequence[int], assignment: Sequence[Sequence[int]]) -> list[int]:
    """The rank that trains each slot's client (``assignment``: ``assign_clients``'s)."""
    rank_of = {client: rank for rank, clients in enumerate(assignment) for client in clients}
    return [rank_of[client] for client in sampled]
