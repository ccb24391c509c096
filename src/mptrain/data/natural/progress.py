"""The progress bar of a long load (LEAF's JSON files, a Hugging Face data set), drawn with
rich as the run's own bar is (``report.console``).

rich redraws from a thread of its own, and a process forked while that thread holds the
terminal's lock inherits it locked forever: the bar is a context manager whose exit stops
and joins the thread, and loading ends before the parent forks its workers. Nothing is drawn
when the output is not a terminal (a log file gets no bar redrawn a thousand times).
"""

from __future__ import annotations

from contextlib import contextmanager


class _Silent:
    def advance(self, amount: int = 1) -> None:
        pass


class _Bar:
    def __init__(self, progress, task):
        self._progress, self._task = progress, task

    def advance(self, amount: int = 1) -> None:
        self._progress.update(self._task, advance=amount)


@contextmanager
def loading_bar(description: str, total: int, unit: str = "bytes"):
    """Yields an object with ``advance(amount)``; ``total`` in ``unit`` (bytes of files read,
    or rows)."""
    from rich.console import Console

    console = Console(highlight=False, stderr=True)
    if not console.is_terminal or total <= 0:
        yield _Silent()
        return
    from rich.progress import (BarColumn, DownloadColumn, MofNCompleteColumn, Progress,
                               TextColumn, TimeElapsedColumn, TimeRemainingColumn)

    amount = DownloadColumn() if unit == "bytes" else MofNCompleteColumn()
    with Progress(TextColumn("{task.description}"), BarColumn(), amount,
                  TimeElapsedColumn(), TimeRemainingColumn(), console=console,
                  transient=True, refresh_per_second=4) as progress:
        yield _Bar(progress, progress.add_task(description, total=total))
