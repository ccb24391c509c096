"""What a server step of FedBuff makes of its buffer: each update's coefficient, and the
change they add up to.

Each row of the pending table holds a client's change (its model minus the version it
started from). The buffer's change is ``sum_k n_k s(tau_k) delta_k / sum_k n_k`` over the
updates that reported (a failed or non-finite one weighs 0): FedAvg's weighting by data
(``n_k``, samples times local epochs) times the staleness weight ``s``, and -- as in FedBuff,
whose buffer is divided by its size, not by its weights -- not renormalised by ``s``, so a
stale buffer moves the model less. With equal clients it is FedBuff's ``(1/B) sum s Delta``.
The server optimizer then steps towards ``x + change`` (``federated.server_opt``).
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from ...comm.reduce import weighted_sum


def buffer_coefficients(data_weights: Sequence[float], staleness: Sequence[int],
                        weight: Callable[[int], float]) -> list[float]:
    """Each buffered update's coefficient (0 for one that did not report); all 0 when
    none did."""
    total = float(sum(w for w in data_weights if w > 0))
    if not total:
        return [0.0] * len(data_weights)
    return [w * weight(s) / total if w > 0 else 0.0 for w, s in zip(data_weights, staleness)]


def buffered_change(rows: torch.Tensor, coefficients: Sequence[float]) -> torch.Tensor | None:
    """``sum_k c_k rows_k`` in buffer order (``comm.reduce.weighted_sum``: the same bits for
    the same rows, whichever slice of the columns a rank holds); None when every
    coefficient is 0 (the step changes nothing)."""
    if not any(coefficients):
        return None
    return weighted_sum(list(rows), coefficients)
