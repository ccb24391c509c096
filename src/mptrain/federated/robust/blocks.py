"""The table of a round's rows is read a block of columns at a time: the Gram matrix and the
coordinate-wise rules never copy more than ``rows x BLOCK_COLUMNS`` floats, and the float64
sums run over the same fixed blocks whatever the number of workers, so that their bits do
not depend on how the columns are cut."""

from __future__ import annotations

#: Columns per block: the Gram matrix and the coordinate-wise rules read the table a block
#: at a time (a copy of rows x BLOCK floats, never of the whole table). Fixed, so that the
#: float64 sums are the same whatever the number of workers.
BLOCK_COLUMNS = 1 << 15


def column_blocks(columns: slice, block: int | None = None):
    """The slice ``columns`` cut into consecutive blocks of at most ``block`` columns
    (default ``BLOCK_COLUMNS``)."""
    block = block or BLOCK_COLUMNS
    for start in range(columns.start, columns.stop, block):
        yield slice(start, min(columns.stop, start + block))
