"""Callbacks: what a run tells code of yours (and the experiment trackers) as it goes.

Subclass :class:`Callback`, override the methods you need and pass instances to
``mptrain.fit(..., callbacks=[...])`` (or ``mptrain.rl.fit``). They run in the process that
presents the run (the parent of the workers; rank 0 under torchrun), in this order::

    on_run_start(config, run_info, resumed_at)      once, before any worker starts
    on_round_end(row)                               after every epoch / round
    on_checkpoint(path, round)                      after each checkpoint written to --out
    on_end(summary, out_dir)                        after the outputs are written
    on_abort(error)                                 instead of on_end, if the run fails or
                                                    is stopped

The experiment trackers (``--logger``, :mod:`mptrain.trackers`) are callbacks too: one
mechanism. They differ in one thing only: a tracker that raises is reported once and
switched off, and the run goes on (a full disk or a lost tracking server must not cost a
training run), while an exception in a callback of yours stops the run like any error in
your code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable

from .errors import error_line, python_caller, setting_name
from .files import STOPS, behind


class Callback:
    """A run's events; every method does nothing unless overridden."""

    def on_run_start(self, config, run_info: dict, resumed_at: int | None) -> None:
        """The run is about to train. ``config``: its complete settings (a ``TrainConfig``,
        or an ``RLConfig``); ``run_info``: where its data and model come from (``data``,
        ``model``, ...); ``resumed_at``: the round a resumed run continues after (its
        checkpoint's), None for a fresh run."""

    def on_round_end(self, row: dict) -> None:
        """One epoch (or fedavg / RL round) is done: ``row`` is its line of metrics.jsonl,
        exactly as written (``epoch`` is the 1-based round number). After a worker
        restart, rounds past the checkpoint are reported again."""

    def on_checkpoint(self, path: Path, round: int) -> None:  # noqa: A002 - the run's word
        """A checkpoint after ``round`` rounds was written to ``path``."""

    def on_end(self, summary: dict, out_dir: Path | None) -> None:
        """The run finished: ``summary`` is summary.json's content; ``out_dir`` holds the
        outputs (None without --out)."""

    def on_abort(self, error: BaseException) -> None:
        """The run failed or was stopped (``error``: what is raised to the caller)."""


EVENTS = ("on_run_start", "on_round_end", "on_checkpoint", "on_end", "on_abort")


class CallbackList:
    """Calls every tracker, then every user callback, for each event.

    A tracker's exception is reported through ``warn`` once, in one line, and that tracker
    gets no further calls; a user callback's exception propagates."""

    def __init__(self, trackers: Iterable = (), callbacks: Iterable = (),
                 warn: Callable[[str], None] | None = None):
        self.trackers = list(trackers)
        self.callbacks = list(callbacks)
        self._warn = warn or (lambda text: None)
        self._failed: set[int] = set()   # ids of the trackers switched off

    def __bool__(self) -> bool:
        return bool(self.trackers or self.callbacks)

    def on_run_start(self, config, run_info: dict, resumed_at: int | None) -> None:
        self._call("on_run_start", config, run_info, resumed_at)

    def on_round_end(self, row: dict) -> None:
        self._call("on_round_end", row)

    def on_checkpoint(self, path: Path, round: int) -> None:  # noqa: A002
        self._call("on_checkpoint", path, round)

    def on_end(self, summary: dict, out_dir: Path | None) -> None:
        self._call("on_end", summary, out_dir)

    def on_abort(self, error: BaseException) -> None:
        self._call("on_abort", error)

    @property
    def active_trackers(self) -> list:
        return [t for t in self.trackers if id(t) not in self._failed]

    def _call(self, event: str, *args) -> None:
        for tracker in self.active_trackers:
            try:
                getattr(tracker, event)(*args)
            except Exception as err:  # noqa: BLE001 - a tracker never stops the run
                stop = behind(err, STOPS)   # ... but a stop its cleanup replaced does
                if stop is not None:
                    raise stop from None
                self._failed.add(id(tracker))
                self._warn(describe_failure(tracker, event, err))
        for callback in self.callbacks:
            method = getattr(callback, event, None)
            if method is not None:
                method(*args)


def logger_setting() -> str:
    """``--logger`` as the caller spells it: ``loggers`` from ``fit()`` and ``rl.fit()``,
    whose one keyword takes the list that the command line gives as ``--logger``."""
    return "loggers" if python_caller() else setting_name("logger")


def describe_failure(tracker, event: str, err: Exception) -> str:
    name = getattr(tracker, "name", type(tracker).__name__)
    return (f"{logger_setting()} {name} failed ({event}: {error_line(err)}); the run goes on "
            f"without it")
