"""Coordinate-wise robust rules: each column (parameter) on its own -- the median, the
trimmed mean, Bulyan's final step -- so each worker computes them on its slice of the
columns, a block at a time, and the bits do not depend on how the columns are cut.
"""

from __future__ import annotations

import functools

import torch

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
