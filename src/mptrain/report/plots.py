"""Figures written as PNG files, and the loss and accuracy curves of a run.

Figures use matplotlib's object API on an Agg canvas: no display needed, no pyplot state
to close, and the user's own backend untouched (``matplotlib.use("Agg")`` inside a library
would switch a notebook's inline backend for the rest of the session).
"""

from __future__ import annotations

from pathlib import Path

from ..files import atomic_write

#: What a figure needs imported: about 0.4 s, paid while workers train when the runner
#: imports them in the background (``launch.warmup.import_in_background``).
MODULES = ("matplotlib.figure", "matplotlib.backends.backend_agg")


def new_figure(figsize: tuple[float, float]):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=figsize)
    FigureCanvasAgg(figure)
    return figure


def save_png(figure, path: Path) -> None:
    """Lay out and write ``figure`` to ``path`` atomically."""
    figure.tight_layout()
    atomic_write(path, lambda handle: figure.savefig(handle, format="png", dpi=100))


def plot_curves(path: Path, epochs: list[dict], title: str, unit: str = "epoch") -> None:
    def series(key):
        # Rounds without an evaluation (--eval-every) or without training (every client of
        # a fedavg round failed) have no point; the line joins the others.
        points = [(row["epoch"], row.get(key)) for row in epochs if row.get(key) is not None]
        return [p[0] for p in points], [p[1] for p in points]

    marker = "o" if len(epochs) <= 50 else None
    score_key = "test_accuracy" if any(r.get("test_accuracy") is not None for r in epochs) \
        else "test_mse"
    figure = new_figure((10, 4))
    loss_axis, score_axis = figure.subplots(1, 2)
    loss_axis.plot(*series("train_loss"), marker=marker, label="train")
    if any(r.get("test_loss") is not None for r in epochs):
        loss_axis.plot(*series("test_loss"), marker=marker, label="test")
    loss_axis.set(xlabel=unit, ylabel="loss", title="loss")
    loss_axis.legend()
    if any(r.get(score_key) is not None for r in epochs):
        score_axis.plot(*series(score_key), marker=marker, color="tab:green", label="test set")
    # fedavg's --client-eval-every: the global model on each client's own data.
    clients = [("client_acc_mean", "clients: mean", "-"),
               ("client_acc_weighted", "clients: weighted mean", "-."),
               ("client_acc_p10", "clients: 10th pct", "--"),
               ("client_acc_worst", "clients: worst", ":")]
    if any(r.get("client_acc_mean") is not None for r in epochs):
        for key, label, style in clients:
            score_axis.plot(*series(key), linestyle=style, color="tab:purple", label=label)
        # --personalize: each client's own model on the same rows.
        if any(r.get("personal_acc_mean") is not None for r in epochs):
            for key, label, style in clients[:3]:
                score_axis.plot(*series(key.replace("client_", "personal_")), linestyle=style,
                                color="tab:orange", label=label.replace("clients", "personal"))
        score_axis.legend()
    score_axis.set(xlabel=unit, title=score_key.replace("_", " "))
    for axis in (loss_axis, score_axis):
        axis.grid(alpha=0.3)
    figure.suptitle(title)
    save_png(figure, path)
