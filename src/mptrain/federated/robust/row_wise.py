"""The maths of robust aggregation, as plain functions over a round's client results.

Two kinds of rule, and why the split matters for the server:

- *coordinate-wise* rules (median, trimmed mean, Bulyan's final step) look at one column
  (parameter) at a time, so each worker computes them on its own slice of the columns, a
  block of columns at a time, and the bits do not depend on how the columns are cut;
- *row-wise* rules (Krum, Multi-Krum, Bulyan's selection, norm bounding, the geometric
  median) need distances between whole updates. All of those distances come from one
  matrix product, the Gram matrix ``G = U U^T`` of the updates ``U = rows - center``
  (``||u_i - u_j||^2 = G_ii + G_jj - 2 G_ij``), accumulated in float64 over fixed blocks of
  columns so that no copy of the table is made. From ``G`` a rule decides coefficients
  ``c`` (and a weight on the center) so that the aggregate is ``sum_i c_i x_i +
  c_center * center``: a linear combination that every worker again applies to its own
  slice. Weiszfeld's algorithm for the geometric median runs entirely on ``G`` (the
  iterate ``z = sum_j c_j x_j`` never exists as a vector): ``||z - x_i||^2 = c^T G c -
  2 (G c)_i + G_ii``.

Rows are client *models* (or updates: every rule here is translation-equivariant, and norm
bounding takes its norms about the center). Only reporting rows are passed in.
"""

from __future__ import annotations

import functools
from typing import Sequence

import torch

#: Columns per block: the Gram matrix and the coordinate-wise rules read the table a block
#: at a time (a copy of rows x BLOCK floats, never of the whole table). Fixed, so that the
#: float64 sums are the same whatever the number of workers.
BLOCK_COLUMNS = 1 << 15
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


def column_blocks(columns: slice, block: int | None = None):
    """The slice ``columns`` cut into consecutive blocks of at most ``block`` columns
    (default ``BLOCK_COLUMNS``)."""
    block = block or BLOCK_COLUMNS
    for start in range(columns.start, columns.stop, block):
        yield slice(start, min(columns.stop, start + block))


# -- row-wise: distances ---------------------------------------------------------------------
def gram_matrix(rows: torch.Tensor, center: torch.Tensor | None = None,
                block: int | None = None) -> torch.Tensor:
    """``U U^T`` in float64 for ``U = rows - center`` ([n, n]), one matrix product per
    block of columns, summed in column order."""
    n, d = rows.shape
    gram = torch.zeros(n, n, dtype=torch.float64)
    for cols in column_blocks(slice(0, d), block):
        part = rows[:, cols].double()
        if center is not None:
            part -= center[cols].double()
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


# -- applying a decision to a block of columns -------------------------------------------------
def combine_rows(rows: torch.Tensor, coefficients: Sequence[float],
                 center: torch.Tensor | None = None, center_weight: float = 0.0) -> torch.Tensor:
    """``sum_i c_i rows_i + center_weight * center``, accumulated in float64 in row order
    (rows with coefficient 0 are skipped), in the rows' dtype."""
    result = torch.zeros(rows.shape[1:], dtype=torch.float64)
    for row, coefficient in zip(rows, coefficients):
        if coefficient:
            result.add_(row, alpha=float(coefficient))
    if center_weight:
        result.add_(center, alpha=center_weight)
    return result.to(rows.dtype)


#: Up to this many rows a block's columns are sorted by a sorting network (elementwise min
#: and max over whole rows, vectorised: ~10x faster than torch.sort along the short axis).
NETWORK_ROWS = 64


@functools.lru_cache(maxsize=None)
def sorting_network(n: int) -> tuple[tuple[int, int], ...]:
    """Batcher's odd-even merge sort for ``n`` items: its compare-exchange pairs ``(a, b)``
    with ``a < b``, for ``n`` padded to a power of two and the pairs that touch the padding
    dropped (padding sorts last, as if infinite, so those pairs never exchange)."""
    size = 1
    while size < n:
        size *= 2
    pairs = []
    p = 1
    while p < size:
        k = p
        while k >= 1:
            for j in range(k % p, size - k, 2 * k):
                for i in range(min(k, size - j - k)):
                    if (i + j) // (2 * p) == (i + j + k) // (2 * p) and i + j + k < n:
                        pairs.append((i + j, i + j + k))
            k //= 2
        p *= 2
    return tuple(pairs)


def sort_columns(rows: torch.Tensor) -> torch.Tensor:
    """Each column of ``rows`` sorted ascending (a new tensor; rows must be finite)."""
    if rows.shape[0] > NETWORK_ROWS:
        return rows.sort(dim=0).values
    values = rows.clone()
    low = torch.empty_like(values[0])
    for a, b in sorting_network(rows.shape[0]):
        torch.minimum(values[a], values[b], out=low)
        torch.maximum(values[a], values[b], out=values[b])
        values[a].copy_(low)
    return values


def _median_of_sorted(values: torch.Tensor) -> torch.Tensor:
    """float64 median of columns already sorted."""
    n = values.shape[0]
    if n % 2:
        return values[n // 2].double()
    return (values[n // 2 - 1].double() + values[n // 2].double()) / 2


def coordinate_median(rows: torch.Tensor) -> torch.Tensor:
    """Yin et al. 2018: each column's median (the mean of the two middle values when the
    count is even)."""
    return _median_of_sorted(sort_columns(rows)).to(rows.dtype)


def trimmed_count(n: int, beta: float) -> int:
    """How many values a trimmed mean cuts from each end of ``n``."""
    return int(beta * n + 1e-9)


def trimmed_mean(rows: torch.Tensor, beta: float) -> torch.Tensor:
    """Yin et al. 2018: each column's mean after cutting ``floor(beta n)`` values from each
    end (``beta < 0.5`` keeps at least one)."""
    k = trimmed_count(rows.shape[0], beta)
    values = sort_columns(rows)
    kept = values[k:values.shape[0] - k]
    return (kept.sum(dim=0, dtype=torch.float64) / kept.shape[0]).to(rows.dtype)


def bulyan_combine(rows: torch.Tensor, f: int) -> torch.Tensor:
    """El Mhamdi et al. 2018, the aggregation over the ``theta`` selected rows: in each
    column, the mean of the ``beta = theta - 2f`` values closest to the column's median
    (equal distances go to the smaller value).

    In sorted order those values are a window ``[s, s + beta)``, and sliding the window one
    place right is right exactly when the value it drops is farther from the median than
    the one it takes (distances fall then rise along sorted values, so the test holds for
    a run of first places and then fails): ``s`` is the length of that run."""
    theta = rows.shape[0]
    beta = theta - 2 * f
    values = sort_columns(rows)
    distance = (values.double() - _median_of_sorted(values)).abs()
    # Equal values at both ends: the window holds one value throughout and sliding it
    # changes nothing, so the slide may go on past them.
    slides = (distance[:theta - beta] > distance[beta:]) \
        | (values[:theta - beta] == values[beta:])
    start = slides.to(torch.int64).cumprod(dim=0).sum(dim=0)   # the run of first places
    window = start + torch.arange(beta).unsqueeze(1)
    return values.gather(0, window).double().mean(dim=0).to(rows.dtype)
