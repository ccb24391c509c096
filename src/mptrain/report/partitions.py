"""What a client partition looks like: size and label spread per client, and a PNG of each
client's label mix, so a user can see how skewed ``--partition`` makes the clients before
spending a federated run on it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .plots import new_figure, save_png

MAX_BARS = 100  # past this the bars are thinner than a pixel at the figure's size


@dataclass(frozen=True)
class Spread:
    """Smallest, median and largest of one per-client quantity."""

    min: int
    median: float
    max: int


@dataclass(frozen=True)
class PartitionStats:
    """``labels`` is None for regression data, where there are no labels to count."""

    clients: int
    samples: Spread
    labels: Spread | None


def partition_stats(parts: list[torch.Tensor], labels: torch.Tensor | None = None
                    ) -> PartitionStats:
    """Per-client sample counts and, given class ``labels``, distinct labels per client."""
    sizes = [len(part) for part in parts]
    distinct = None
    if labels is not None:
        distinct = _spread([int(torch.unique(labels[part]).numel()) for part in parts])
    return PartitionStats(clients=len(parts), samples=_spread(sizes), labels=distinct)


def stats_rows(stats: PartitionStats) -> list[tuple[str, str, str, str]]:
    """Table rows (quantity, min, median, max) as text, for whatever renders the table."""
    rows = [("samples per client", *_texts(stats.samples))]
    if stats.labels is not None:
        rows.append(("distinct labels per client", *_texts(stats.labels)))
    return rows


def plot_label_mix(path: Path, parts: list[torch.Tensor], targets: torch.Tensor,
                   num_classes: int | None) -> None:
    """One stacked bar per client (the first ``MAX_BARS``), one colour per label; plain
    sample-count bars when ``num_classes`` is None (regression)."""
    shown = parts[:MAX_BARS]
    x = range(len(shown))
    figure = new_figure((max(6.0, min(16.0, 0.15 * len(shown) + 3)), 4.5))
    axis = figure.subplots()
    if num_classes is None:
        axis.bar(x, [len(part) for part in shown], width=0.9, color="tab:blue")
    else:
        counts = torch.stack([torch.bincount(targets[part], minlength=num_classes)
                              for part in shown]).numpy()
        from matplotlib import colormaps

        colours = colormaps["tab10" if num_classes <= 10 else "tab20" if num_classes <= 20
                           else "viridis"]
        bottom = counts[:, 0] * 0
        for label in range(num_classes):
            axis.bar(x, counts[:, label], bottom=bottom, width=0.9, label=str(label),
                     color=colours(label if num_classes <= 20 else label / (num_classes - 1)))
            bottom = bottom + counts[:, label]
        if num_classes <= 20:  # a legend of hundreds of labels hides the plot
            axis.legend(title="label", loc="upper left", bbox_to_anchor=(1.0, 1.0),
                        fontsize="small")
    capped = f" (first {len(shown)} of {len(parts)} clients)" if len(parts) > len(shown) else ""
    axis.set_xlim(-0.6, len(shown) - 0.4)
    axis.set(xlabel="client", ylabel="samples",
             title=f"label mix per client{capped}" if num_classes else
             f"samples per client{capped}")
    axis.grid(axis="y", alpha=0.3)
    save_png(figure, path)


def _spread(values: list[int]) -> Spread:
    ordered = sorted(values)
    middle = len(ordered) // 2
    median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    return Spread(min=ordered[0], median=float(median), max=ordered[-1])


def _texts(spread: Spread) -> tuple[str, str, str]:
    median = spread.median
    middle = f"{int(median):,}" if median.is_integer() else f"{median:,.1f}"
    return f"{spread.min:,}", middle, f"{spread.max:,}"


def partition_heterogeneity(index: torch.Tensor, offsets: torch.Tensor, targets: torch.Tensor,
                            num_classes: int | None):
    """The cut's heterogeneity (``data.heterogeneity``): Hellinger distances of the label
    mixes (classification only) and the size Gini."""
    from ..data.heterogeneity import heterogeneity

    labels = targets.cpu().numpy() if num_classes is not None else None
    return heterogeneity(labels, index.numpy(), offsets.numpy(), num_classes)


def heterogeneity_rows(spread) -> list[tuple[str, str, str, str]]:
    """The Hellinger distances as a (quantity, min, median, max) table row."""
    if not len(spread.hellinger):
        return []
    values = spread.hellinger
    return [("Hellinger distance to pooled labels", f"{values.min():.3f}",
             f"{float(np.median(values)):.3f}", f"{values.max():.3f}")]


def heterogeneity_line(spread) -> str:
    """One line: the Hellinger distances' mean and percentiles, and the size Gini."""
    parts = []
    if len(spread.hellinger):
        summary = spread.hellinger_summary()
        parts.append("label heterogeneity: Hellinger to pooled " + ", ".join(
            f"{name} {value:.3f}" for name, value in summary.items()))
    parts.append(f"size Gini {spread.size_gini:.3f}")
    return " · ".join(parts)
