"""A robust server round over the shared table of client results, as plain functions that
the fedavg workers call between their barriers (and tests call without processes):

1. ``forge_alie_slice_``: each worker writes ALIE's forged update into the attackers' rows,
   on its own slice of the columns (mean and std are per column);
2. ``decide_round``: one worker decides, from the whole rows, what a row-wise rule keeps
   and how it weighs it (one Gram matrix, accumulated a block of columns at a time: no copy
   of the table); fedavg hands the decision to the others (``DecisionCell``);
3. ``aggregate_slice``: each worker applies the rule to its slice, a block at a time.

The table holds ``rows`` slots, one per sampled client; a slot whose weight is 0 did not
report (failed, dropped out, non-finite) and takes no part. Every sum runs in slot
(client-id) order over fixed blocks, so the result does not depend on how many workers
share the columns.
"""

from __future__ import annotations

from typing import Sequence

import torch

from .attacks import alie_rows_
from .blocks import column_blocks
from .row_wise import gram_matrix
from .rules import RobustRule, RuleDecision


def reporting_slots(weights: Sequence[float]) -> list[int]:
    """The table's slots that reported this round (weight > 0), in slot order."""
    return [slot for slot, weight in enumerate(weights) if weight > 0]


def forge_alie_slice_(table: torch.Tensor, honest: Sequence[int], malicious: Sequence[int],
                      columns: slice, z: float) -> None:
    """ALIE's ``mean + z std`` of the ``honest`` slots, written into the ``malicious``
    slots, for ``columns`` of the table (a block at a time)."""
    if not malicious:
        return
    for cols in column_blocks(columns):
        alie_rows_(table[:, cols], honest, malicious, z)


def row_is_finite(row: torch.Tensor) -> bool:
    """Whether a whole row is finite, read a block of columns at a time (no row-long
    temporary)."""
    return all(bool(torch.isfinite(row[cols]).all())
               for cols in column_blocks(slice(0, row.shape[0])))


def decide_round(rule: RobustRule, table: torch.Tensor, kept: Sequence[int],
                 weights: Sequence[float], global_flat: torch.Tensor) -> RuleDecision:
    """A row-wise rule's decision over the reporting slots ``kept`` (their ``weights``):
    the Gram matrix of their updates about ``global_flat``, a block of columns at a time."""
    return rule.decide(gram_matrix(table, global_flat, kept), weights)


def aggregate_slice(rule: RobustRule, table: torch.Tensor, kept: Sequence[int],
                    weights: Sequence[float], columns: slice, global_flat: torch.Tensor,
                    decision: RuleDecision | None) -> torch.Tensor:
    """The rule's aggregate of ``columns`` over the reporting slots ``kept``, computed a
    block of columns at a time (``global_flat``: the global model, whole)."""
    index = torch.as_tensor(list(kept), dtype=torch.int64)
    out = torch.empty(columns.stop - columns.start, dtype=table.dtype)
    for cols in column_blocks(columns):
        block = table[index, cols]
        out[cols.start - columns.start:cols.stop - columns.start] = rule.combine(
            block, weights, decision, global_flat[cols])
    return out
