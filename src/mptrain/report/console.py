"""The one place that prints during a run: banner, one progress bar, one line per epoch."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)

from .metrics import RoundMetrics


class ConsolePresenter:
    """Banner, progress bar and per-round lines.

    The progress display redraws from a thread of its own, and a process forked while that
    thread holds the terminal's lock inherits the lock held forever. So the display starts
    at the first progress update, never at the start of a round: the parent forks its
    workers between the two, with no thread but its own.
    """

    def __init__(self, quiet: bool = False, console: Console | None = None,
                 silent: bool = False, other_node: str | None = None):
        self.quiet = quiet or silent or other_node is not None
        self.silent = silent     # not even notes: another process speaks for the run
        # Under torchrun, another node's first rank ("node 1 (rank 2)"): rank 0 speaks for
        # the run, this one only for its own machine.
        self.other_node = other_node
        self.console = console or Console(highlight=False, soft_wrap=True)
        self._progress: Progress | None = None
        self._task = None
        self._pending: tuple[str, int] | None = None   # a round announced, not yet drawn

    def banner(self, lines: list[str]) -> None:
        if self.quiet:
            return
        self.console.print(f"[bold]mptrain[/bold] {lines[0]}")
        for line in lines[1:]:
            self.console.print(f"  {line}")

    def start_round(self, epoch: int, epochs: int, total_samples: int,
                    unit: str = "epoch") -> None:
        if self.quiet:
            return
        self._pending = (f"{unit} {epoch}/{epochs}", total_samples)
        if self._progress is not None:  # already drawing: no fork can come in between
            self._show_pending()

    def update(self, samples_done: int, rate: float | None = None) -> None:
        if self.quiet:
            return
        if self._progress is None and self._pending is not None:
            self._progress = Progress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                console=self.console, transient=True, refresh_per_second=8)
            self._progress.start()
        if self._pending is not None:
            self._show_pending()
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, completed=samples_done,
                                  rate=f"{rate:,.0f} samples/s" if rate else "")

    def _show_pending(self) -> None:
        if self._task is not None:
            self._progress.remove_task(self._task)
        description, total = self._pending
        self._task = self._progress.add_task(description, total=total, rate="")
        self._pending = None

    def end_round(self, metrics: RoundMetrics, epochs: int, unit: str = "epoch",
                  parts: list[str] | None = None) -> None:
        self._pending = None
        if self._progress is not None and self._task is not None:
            self._progress.remove_task(self._task)
            self._task = None
        if self.quiet:
            return
        self.console.print(format_round_line(metrics, epochs, unit, parts))

    def note(self, text: str) -> None:
        """Something the user must know even in --quiet mode (a restart, a fallback)."""
        self.close()
        if self.silent or self.other_node is not None:
            return
        _to_stderr(text)

    def machine_note(self, text: str) -> None:
        """A note about this machine (its cores, its memory): under torchrun every node
        says its own, on its own terminal."""
        self.close()
        if self.silent:
            return
        _to_stderr(text if self.other_node is None else f"{self.other_node}: {text}")

    def close(self) -> None:
        if self._progress is not None:
            # rich signals its refresh thread to stop but does not wait for it; a restart
            # forks right after this, so wait (rich keeps the thread in a private field).
            refresh = getattr(getattr(self._progress, "live", None), "_refresh_thread", None)
            self._progress.stop()
            if refresh is not None:
                refresh.join(timeout=2.0)
            self._progress = None
            self._task = None

    def result(self, lines: list[str]) -> None:
        self.close()
        if self.quiet:
            return
        for line in lines:
            self.console.print(line)


def format_round_line(m: RoundMetrics, epochs: int, unit: str = "epoch",
                      parts: list[str] | None = None) -> str:
    """``epoch 3/10`` and then ``parts``: what the run's strategy shows of a round
    (``Strategy.round_line``), by default :func:`metric_parts`."""
    counter = f"{unit} {m.epoch:>{len(str(epochs))}}/{epochs}"
    return "  ".join([counter] + (metric_parts(m) if parts is None else parts))


def metric_parts(m: RoundMetrics) -> list[str]:
    """Losses, score, throughput and time of a supervised round."""
    parts = []
    if m.train_loss is not None:
        parts.append(f"train loss {m.train_loss:.4f}")
    if m.test_loss is not None:
        parts.append(f"test loss {m.test_loss:.4f}")
    if m.test_accuracy is not None:
        parts.append(f"test acc {100 * m.test_accuracy:.2f}%")
    if m.test_mse is not None:
        parts.append(f"test mse {m.test_mse:.4f}")
    parts.append(f"{m.samples_per_s:,.0f} samples/s")
    parts.append(f"{m.epoch_s:.2f} s")
    return parts


def _to_stderr(text: str) -> None:
    Console(stderr=True, highlight=False, soft_wrap=True).print(f"mptrain: {text}")
