"""Loss and accuracy curves as a PNG (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path

from ..files import atomic_write


def plot_curves(path: Path, epochs: list[dict], title: str, unit: str = "epoch") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def series(key):
        # Rounds without an evaluation (--eval-every) or without training (every client of
        # a fedavg round failed) have no point; the line joins the others.
        points = [(row["epoch"], row.get(key)) for row in epochs if row.get(key) is not None]
        return [p[0] for p in points], [p[1] for p in points]

    marker = "o" if len(epochs) <= 50 else None
    score_key = "test_accuracy" if any(r.get("test_accuracy") is not None for r in epochs) \
        else "test_mse"
    figure, (loss_axis, score_axis) = plt.subplots(1, 2, figsize=(10, 4))
    loss_axis.plot(*series("train_loss"), marker=marker, label="train")
    if any(r.get("test_loss") is not None for r in epochs):
        loss_axis.plot(*series("test_loss"), marker=marker, label="test")
    loss_axis.set(xlabel=unit, ylabel="loss", title="loss")
    loss_axis.legend()
    if any(r.get(score_key) is not None for r in epochs):
        score_axis.plot(*series(score_key), marker=marker, color="tab:green")
    score_axis.set(xlabel=unit, title=score_key.replace("_", " "))
    for axis in (loss_axis, score_axis):
        axis.grid(alpha=0.3)
    figure.suptitle(title)
    figure.tight_layout()
    atomic_write(path, lambda handle: figure.savefig(handle, format="png", dpi=100))
    plt.close(figure)
