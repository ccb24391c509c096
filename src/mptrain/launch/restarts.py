"""Restart and stop policy for a run: how often failed workers are restarted, and what a
signal turns into. The runner says what one attempt is; this module decides what happens
when an attempt fails or the user stops it."""

from __future__ import annotations

import signal
from contextlib import contextmanager
from typing import Callable

from ..errors import Interrupted, RunInterrupted, WorkerFailedError


def run_with_restarts(attempt: Callable[[], None], max_restarts: int,
                      on_restart: Callable[[WorkerFailedError, int], None],
                      describe_stop: Callable[[int], str]) -> int:
    """Call ``attempt`` until it returns; after a worker failure call ``on_restart`` and try
    again, at most ``max_restarts`` times. Return the number of restarts.

    Ctrl-C and SIGTERM (raised as KeyboardInterrupt / Interrupted) become
    :class:`RunInterrupted` with ``describe_stop(signum)`` and exit code 128 + signum.
    """
    restarts = 0
    try:
        while True:
            try:
                attempt()
                return restarts
            except WorkerFailedError as failure:
                if restarts >= max_restarts:
                    raise
                restarts += 1
                on_restart(failure, restarts)
    except (KeyboardInterrupt, Interrupted) as stop:
        signum = stop.signum if isinstance(stop, Interrupted) else signal.SIGINT
        raise RunInterrupted(describe_stop(signum), 128 + signum) from None


@contextmanager
def sigterm_raises():
    """While inside, SIGTERM raises :class:`Interrupted` in the main thread, as Ctrl-C raises
    KeyboardInterrupt: the run stops the same way for both (the command installs it)."""
    def _raise(signum, frame):
        raise Interrupted(signum)

    previous = signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
