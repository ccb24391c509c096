"""Loss and accuracy curves as a PNG (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path

from .outputs import atomic_write


def plot_curves(path: Path, epochs: list[dict], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [row["epoch"] for row in epochs]
    score_key = "test_accuracy" if any(r.get("test_accuracy") is not None for r in epochs) \
        else "test_mse"
    figure, (loss_axis, score_axis) = plt.subplots(1, 2, figsize=(10, 4))
    loss_axis.plot(x, [r["train_loss"] for r in epochs], marker="o", label="train")
    if any(r.get("test_loss") is not None for r in epochs):
        loss_axis.plot(x, [r["test_loss"] for r in epochs], marker="o", label="test")
    loss_axis.set(xlabel="epoch", ylabel="loss", title="loss")
    loss_axis.legend()
    scores = [r.get(score_key) for r in epochs]
    if any(s is not None for s in scores):
        score_axis.plot(x, scores, marker="o", color="tab:green")
    score_axis.set(xlabel="epoch", title=score_key.replace("_", " "))
    for axis in (loss_axis, score_axis):
        axis.grid(alpha=0.3)
    figure.suptitle(title)
    figure.tight_layout()
    atomic_write(path, lambda handle: figure.savefig(handle, format="png", dpi=100))
    plt.close(figure)
