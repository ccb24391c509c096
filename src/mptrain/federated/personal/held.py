"""The server's step with the global model's personal columns held where they are.

FedPer's, FedRep's and FedBN's personal layers live on the clients: in a real deployment
the server never receives them, so whatever stands in their columns of a round's rows
must not move the global model there. An honest client's row already carries the global
values (a zero update), but not every row is honest's, nor every update the rows' mean:
a gaussian attacker's row is noise in every column, and DP adds noise to every column of
the mean. Those columns of the global model are what a client never trained starts its
personal layers from, and what scores the global model; held, they stay the model's
initial values for the whole run, as the docs say.
"""

from __future__ import annotations

from typing import Sequence

import torch


class HeldColumns:
    """``server`` (a ``ServerOptimizer``) stepping every column but ``columns``
    (``(start, stop)`` pairs of ``global_flat``), whose values are put back after the
    step: whatever the optimizer's state holds there (noise the mean brought in, momentum
    from a checkpoint written before the columns were held), the values never move."""

    def __init__(self, server, columns: Sequence[tuple[int, int]], global_flat: torch.Tensor):
        self.server, self.columns, self.global_flat = server, list(columns), global_flat

    def step_(self, params: torch.Tensor, average: torch.Tensor,
              state: dict[str, torch.Tensor]) -> None:
        """``server.step_`` on ``params``, a slice of ``global_flat`` (a view of it, as
        every caller passes: a rank's slice of the columns, or the whole)."""
        first = self._first_column(params)
        spans = [slice(max(start, first) - first, min(stop, first + params.numel()) - first)
                 for start, stop in self.columns]
        kept = [(span, params[span].clone()) for span in spans if span.start < span.stop]
        self.server.step_(params, average, state)
        for span, values in kept:
            params[span].copy_(values)

    def _first_column(self, params: torch.Tensor) -> int:
        """The column of ``global_flat`` where ``params`` begins."""
        flat = self.global_flat
        first = params.storage_offset() - flat.storage_offset()
        if (params.dim() != 1 or params.stride(0) != 1
                or params.untyped_storage().data_ptr() != flat.untyped_storage().data_ptr()
                or first < 0 or first + params.numel() > flat.numel()):
            raise RuntimeError("the server's step was given parameters that are not a "
                               "slice of the global model")
        return first


def hold_columns(server, columns: Sequence[tuple[int, int]], global_flat: torch.Tensor):
    """``server`` with ``columns`` held (``server`` itself when there are none)."""
    return HeldColumns(server, columns, global_flat) if columns else server


def carry_global_(row: torch.Tensor, columns: Sequence[tuple[int, int]],
                  global_flat: torch.Tensor) -> None:
    """Put the global model's values in ``row``'s ``columns``: what a client's row carries
    in the columns it never sends (a zero update there, for the robust rules' distances
    and DP's clip as for the mean)."""
    for start, stop in columns:
        row[start:stop].copy_(global_flat[start:stop])
