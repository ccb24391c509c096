"""How unlike each other a partition's clients are, in the two figures papers report: the
Hellinger distance of each client's label distribution to the pooled one (0: the same mix,
1: no label in common), and the Gini coefficient of the client sizes (0: equal sizes,
towards 1: one client holds almost everything).

Computed on a cut as fedavg keeps it (``index``, ``offsets``: client c owns
``index[offsets[c]:offsets[c + 1]]``) in a few array operations, so 100,000 clients cost a
``[clients, classes]`` table and no per-client Python loop. The pooled distribution is that
of the samples some client owns (``shards:K``'s remainder and unused classes left out).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PERCENTILES = (10, 50, 90)


@dataclass(frozen=True)
class Heterogeneity:
    """``hellinger``: one distance per client; ``size_gini``: of the client sizes."""

    hellinger: np.ndarray
    size_gini: float

    def hellinger_summary(self) -> dict:
        """Mean, the ``PERCENTILES`` and the largest distance, by name (p10, p50, ...)."""
        values = self.hellinger
        summary = {"mean": float(values.mean())}
        summary.update({f"p{q}": float(np.percentile(values, q)) for q in PERCENTILES})
        summary["max"] = float(values.max())
        return summary


def label_counts(labels: np.ndarray, index: np.ndarray, offsets: np.ndarray,
                 classes: int) -> np.ndarray:
    """``[clients, classes]``: how many samples of each class each client owns."""
    clients = len(offsets) - 1
    owner = np.repeat(np.arange(clients), np.diff(offsets))
    cells = owner * classes + labels[index]
    return np.bincount(cells, minlength=clients * classes).reshape(clients, classes)


def hellinger_to_pooled(counts: np.ndarray) -> np.ndarray:
    """Each row's distribution against the rows' total: ``sqrt(1/2 sum (sqrt p - sqrt
    q)^2)``, in [0, 1]. An empty row (a client without samples) is at distance 1."""
    pooled = counts.sum(axis=0) / counts.sum()
    sizes = counts.sum(axis=1, keepdims=True)
    own = np.divide(counts, sizes, out=np.zeros(counts.shape), where=sizes > 0)
    distance = np.sqrt(0.5 * ((np.sqrt(own) - np.sqrt(pooled)) ** 2).sum(axis=1))
    return np.where(sizes[:, 0] > 0, distance, 1.0)


def gini(sizes: np.ndarray) -> float:
    """The Gini coefficient ``sum_ij |x_i - x_j| / (2 n^2 mean)`` from the sorted sizes
    (O(n log n)); 0 for equal sizes."""
    ordered = np.sort(np.asarray(sizes, dtype=np.float64))
    n, total = len(ordered), ordered.sum()
    if n == 0 or total == 0:
        return 0.0
    ranks = np.arange(1, n + 1)
    return float((2 * ranks - n - 1) @ ordered / (n * total))


def heterogeneity(labels: np.ndarray, index: np.ndarray, offsets: np.ndarray,
                  classes: int | None) -> Heterogeneity:
    """Both figures of a cut; without ``classes`` (regression) the distances are empty."""
    sizes = np.diff(offsets)
    if classes is None:
        return Heterogeneity(hellinger=np.zeros(0), size_gini=gini(sizes))
    counts = label_counts(labels, index, offsets, classes)
    return Heterogeneity(hellinger=hellinger_to_pooled(counts), size_gini=gini(sizes))
