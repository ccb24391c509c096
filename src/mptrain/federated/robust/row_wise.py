"""Row-wise robust rules: decisions that need the distances between whole updates (Krum,
Multi-Krum, Bulyan's selection, norm bounding, the geometric median).

All of those distances come from one matrix product, the Gram matrix ``G = U U^T`` of the
updates ``U = rows - global_flat`` (``||u_i - u_j||^2 = G_ii + G_jj - 2 G_ij``), accumulated
in float64 over fixed blocks of columns (``blocks``) so that no copy of the table is made.
From ``G`` a rule decides coefficients ``c`` (and a weight on the global model) so that the
aggregate is ``sum_i c_i x_i + c_global * global_flat``: a linear combination that every
worker applies to its own slice of the columns. Weiszfeld's algorithm for the geometric
median runs entirely on ``G`` (the iterate ``z = sum_j c_j x_j`` never exists as a vector):
``||z - x_i||^2 = c^T G c - 2 (G c)_i + G_ii``.

Rows are client *models* (or updates: every rule here is translation-equivariant, and norm
bounding takes its norms about the global model). Only reporting rows are passed in.
"""

from __future__ import annotations

from typing import Sequence

import torch

from .blocks import column_blocks

#: Smoothed Weiszfeld (Pillutla et al. 2022): the smoothing nu (RFA's), the step that ends
#: the iteration (relative to the median distance from the iterate to the rows) and a cap
#: on the iterations. Not RFA's test (the objective moving by < 1e-6 of itself): with
#: updates far away -- an attacker's noise of STD 1e15 -- the objective is their distances'
#: almost alone and stops moving, relatively, while the iterate is still ~tol x their
#: distance from the rest. The median distance is the majority's scale. Each iteration
#: costs O(n^2) here, on the Gram matrix, not O(n d) as in RFA, so the test is tight and
#: the cap far above the ~log4(outlier distance) steps the iterate needs to come back.
WEISZFELD_NU = 1e-6
WEISZFELD_RTOL = 1e-10
WEISZFELD_MAX_ITERATIONS = 1000


# -- row-wise: distances ---------------------------------------------------------------------
def gram_matrix(table: torch.Tensor, global_flat: torch.Tensor | None = None,
                kept: Sequence[int] | None = None, block: int | None = None) -> torch.Tensor:
    """``U U^T`` in float64 for ``U = rows - global_flat`` ([n, n]): the rows ``kept`` of
    ``table`` (every row when None), one matrix product per block of columns, summed in
    column order. Only a block of the kept rows is ever copied, never the table."""
    index = None if kept is None else torch.as_tensor(list(kept), dtype=torch.int64)
    n, d = (table.shape[0] if index is None else len(index)), table.shape[1]
    gram = torch.zeros(n, n, dtype=torch.float64)
    for cols in column_blocks(slice(0, d), block):
        part = (table[:, cols] if index is None else table[index, cols]).double()
        if global_flat is not None:
            part -= global_flat[cols].double()
        gram += part @ part.T
    return gram


def squared_distances(gram: torch.Tensor) -> torch.Tensor:
    """Pairwise squared distances from a Gram matrix (rounding's negatives cut to 0, the
    diagonal exactly 0)."""
    diag = gram.diagonal()
    distances = (diag[:, None] + diag[None, :] - 2 * gram).clamp_(min=0)
    distances.fill_diagonal_(0)
    return distances


def krum_scores(distances: torch.Tensor, f: int) -> torch.Tensor:
    """Blanchard et al. 2017: each row's score is the sum of its squared distances to its
    ``n - f - 2`` nearest other rows. Krum assumes n > 2f + 2; Bulyan's last selections
    run on fewer remaining rows, where ``n - f - 2 < 1``: then a row scores its distances
    to every other (the row closest to all, never the first in order); a lone row 0."""
    n = distances.shape[0]
    neighbours = n - f - 2 if n - f - 2 >= 1 else n - 1
    if n < 2:
        return torch.zeros(n, dtype=torch.float64)
    others = distances.clone()
    others.fill_diagonal_(float("inf"))
    return others.sort(dim=1).values[:, :neighbours].sum(dim=1)


def krum_select(distances: torch.Tensor, f: int, m: int = 1) -> list[int]:
    """Multi-Krum: the ``m`` rows of lowest score (Krum: ``m = 1``), best first; equal
    scores go to the lower row."""
    scores = krum_scores(distances, f)
    order = torch.sort(scores, stable=True).indices
    return order[:m].tolist()


def bulyan_select(distances: torch.Tensor, f: int) -> list[int]:
    """El Mhamdi et al. 2018, the selection: Krum applied again and again, each time to the
    rows not yet chosen, until ``theta = n - 2f`` rows are chosen (in the order chosen)."""
    n = distances.shape[0]
    remaining = list(range(n))
    chosen: list[int] = []
    while len(chosen) < n - 2 * f:
        sub = distances[remaining][:, remaining]
        best = remaining[krum_select(sub, f, 1)[0]]
        chosen.append(best)
        remaining.remove(best)
    return chosen


def norm_bound_scales(gram: torch.Tensor, bound: float) -> torch.Tensor:
    """Sun et al. 2019: each update is scaled by ``min(1, C / ||u_i||)`` so that none is
    longer than ``C``."""
    norms = gram.diagonal().clamp(min=0).sqrt()
    return torch.where(norms > bound, bound / norms.clamp(min=1e-300),
                       torch.ones_like(norms))


def weiszfeld(gram: torch.Tensor, weights: Sequence[float], nu: float = WEISZFELD_NU,
              rtol: float = WEISZFELD_RTOL,
              max_iterations: int = WEISZFELD_MAX_ITERATIONS) -> tuple[torch.Tensor, int]:
    """The weighted geometric median ``argmin_z sum_i a_i ||z - x_i||`` by smoothed
    Weiszfeld (RFA, Pillutla et al. 2022, Algorithm 2), started at the weighted mean and run
    on the Gram matrix of the rows: returns the coefficients ``c`` (summing to 1) of
    ``z = sum_i c_i x_i``, and the iterations taken. Stops when a step moves ``z`` by at
    most ``rtol`` of the median distance from ``z`` to the rows.

    About the Gram matrix's center every term of ``||z - x_i||^2`` is of the size of the
    distances themselves once ``z`` is near the majority (a far row's coefficient is then
    about 1 / its distance), so far rows cost no precision there."""
    alphas = torch.as_tensor(list(weights), dtype=torch.float64)
    alphas = alphas / alphas.sum()
    diag = gram.diagonal()
    coefficients = alphas.clone()
    iterations = 0
    while iterations < max_iterations:
        g_c = gram @ coefficients
        distances = (coefficients @ g_c - 2 * g_c + diag).clamp(min=0).sqrt()
        betas = alphas / distances.clamp(min=nu)
        step = betas / betas.sum() - coefficients
        coefficients += step
        iterations += 1
        moved = max(float(step @ gram @ step), 0.0) ** 0.5   # ||z_new - z||
        if moved <= rtol * float(distances.median()):
            break
    return coefficients, iterations
