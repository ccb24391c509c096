"""A robust server round over the shared table of client results, as plain functions that
the fedavg workers call between their barriers (and tests call without processes):

1. ``forge_alie_slice_``: each worker writes ALIE's forged update into the attackers' rows,
   on its own slice of the columns (mean and std are per column);
2. ``plan_round``: one worker decides, from the whole rows, what a row-wise rule keeps and
   how it weighs it (one Gram matrix, accumulated a block of columns at a time: no copy of
   the table); ``PlanCell`` carries the decision to the others through shared memory;
3. ``aggregate_slice``: each worker applies the rule to its slice, a block at a time.

The table holds ``rows`` slots, one per sampled client; a slot whose weight is 0 did not
report (failed, dropped out, non-finite) and takes no part. Every sum runs in slot
(client-id) order over fixed blocks, so the result does not depend on how many workers
share the columns.
"""

from __future__ import annotations

from typing import Sequence

import torch

from . import row_wise as robust
from .attacks import alie_rows_
from .rules import RobustRule, RoundPlan


def reporting_slots(weights: Sequence[float]) -> list[int]:
    """The table's slots that reported this round (weight > 0), in slot order."""
    return [slot for slot, weight in enumerate(weights) if weight > 0]


def forge_alie_slice_(table: torch.Tensor, honest: Sequence[int], malicious: Sequence[int],
                      columns: slice, z: float) -> None:
    """ALIE's ``mean + z std`` of the ``honest`` slots, written into the ``malicious``
    slots, for ``columns`` of the table (a block at a time)."""
    if not malicious:
        return
    for cols in robust.column_blocks(columns):
        alie_rows_(table[:, cols], honest, malicious, z)


def row_is_finite(row: torch.Tensor) -> bool:
    """Whether a whole row is finite, read a block of columns at a time (no row-long
    temporary)."""
    return all(bool(torch.isfinite(row[cols]).all())
               for cols in robust.column_blocks(slice(0, row.shape[0])))


def plan_round(rule: RobustRule, table: torch.Tensor, kept: Sequence[int],
               weights: Sequence[float], center: torch.Tensor) -> RoundPlan:
    """A row-wise rule's decision over the reporting slots ``kept`` (their ``weights``):
    the Gram matrix of their updates about ``center``, a block of columns at a time."""
    n = len(kept)
    gram = torch.zeros(n, n, dtype=torch.float64)
    index = torch.as_tensor(list(kept), dtype=torch.int64)
    for cols in robust.column_blocks(slice(0, table.shape[1])):
        part = table[index, cols].double()
        part -= center[cols].double()
        gram += part @ part.T
    return rule.plan(gram, weights)


def aggregate_slice(rule: RobustRule, table: torch.Tensor, kept: Sequence[int],
                    weights: Sequence[float], columns: slice, center: torch.Tensor,
                    plan: RoundPlan | None) -> torch.Tensor:
    """The rule's aggregate of ``columns`` over the reporting slots ``kept``, computed a
    block of columns at a time (``center``: the global model, whole)."""
    index = torch.as_tensor(list(kept), dtype=torch.int64)
    out = torch.empty(columns.stop - columns.start, dtype=table.dtype)
    for cols in robust.column_blocks(columns):
        block = table[index, cols]
        out[cols.start - columns.start:cols.stop - columns.start] = rule.combine(
            block, weights, plan, center[cols])
    return out


class PlanCell:
    """A round's ``RoundPlan`` in one shared float64 tensor, so that the worker that
    decides can hand it to the others (written before a barrier, read after it).

    Layout: ``[coefficients (rows) | selected flags (rows) | center_weight, bounded,
    iterations, n, update_norm]``."""

    def __init__(self, rows: int):
        self.rows = rows
        self.tensor = torch.zeros(2 * rows + 5, dtype=torch.float64)

    def write(self, plan: RoundPlan, n: int) -> None:
        t, rows = self.tensor, self.rows
        t.zero_()
        if plan.coefficients:
            t[:n] = torch.tensor(plan.coefficients, dtype=torch.float64)
        for position in plan.selected:
            t[rows + position] = 1.0
        t[2 * rows:] = torch.tensor([plan.center_weight, plan.bounded, plan.iterations, n,
                                     plan.update_norm], dtype=torch.float64)

    def read(self) -> RoundPlan:
        t, rows = self.tensor, self.rows
        center_weight, bounded, iterations, n, norm = t[2 * rows:].tolist()
        n = int(n)
        selected = tuple(int(i) for i in torch.nonzero(t[rows:rows + n]).flatten())
        return RoundPlan(tuple(t[:n].tolist()),
                         center_weight=center_weight, selected=selected,
                         bounded=int(bounded), iterations=int(iterations),
                         update_norm=norm)
