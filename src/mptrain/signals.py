"""Holding the stop signals (SIGINT, SIGTERM, SIGHUP) back around steps a stop must not
split (starting a worker, putting a file in place and recording that it is there). No
process management here: the files layer uses these as well as the launcher."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

#: Ctrl-C, a stop request, and the terminal going away (a closed window, a dropped ssh
#: session): each stops a run the same way, cleanly. SIGHUP's default action would end the
#: command where it stands, leaving what a SIGKILL leaves.
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP")
                     if hasattr(signal, name))


def replaceable(sig: int) -> bool:
    """Whether this process may take ``sig`` over for a while and put the old handler
    back: not when it is ignored (the user's choice: nohup's SIGHUP) nor when its handler
    was installed outside Python (``signal.getsignal`` gives None, which cannot be put
    back)."""
    handler = signal.getsignal(sig)
    return handler is not None and handler != signal.SIG_IGN


def take_over(handler, signals) -> dict:
    """Give each of ``signals`` to ``handler``; return the handlers it replaced, by signal,
    for :func:`put_back`. ``signal.signal`` first runs the handlers of signals already
    pending, and one may raise (a stop that came just before): the handlers taken so far
    are then put back before it goes on."""
    previous: dict = {}
    try:
        for sig in signals:
            previous[sig] = signal.signal(sig, handler)
    except BaseException:
        put_back(previous)
        raise
    return previous


def put_back(handlers: dict) -> None:
    """Put every handler of ``handlers`` (signal -> handler) back, each whatever happens to
    the others: a pending signal's handler may raise a stop while they are (see
    :func:`take_over`); it is raised once every handler is back."""
    stop = None
    for sig, handler in handlers.items():
        while True:
            try:
                signal.signal(sig, handler)
                break
            except BaseException as raised:   # noqa: BLE001 - raised below
                stop = stop or raised
    if stop is not None:
        raise stop


@contextmanager
def stop_signals_held():
    """Hold the stop signals back in this thread for the block (a no-op where signals cannot be
    masked): no handler runs inside ``fork()`` while a worker starts, and the child starts
    with them held (see below). Other threads may still take them: for Python code that a
    stop must not split, use ``stop_signals_deferred``.

    A forked child inherits the mask: it unblocks in ``ignore_interrupts``, after setting
    its own dispositions, so a signal meant for it during its start is not lost either.
    """
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        # Unblocking runs the handlers of pending signals before it returns.
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@contextmanager
def stop_signals_noted():
    """While the block runs, the stop signals only append to the yielded list; the caller
    decides what to do with them after it. Python runs signal handlers in the main thread,
    whichever thread the kernel delivered a signal to (torch's threads among them), so
    masking the signals in this thread alone would not keep a handler out of the block.
    Main thread only: elsewhere Python runs no handlers anyway.

    No signal falls between the handlers: Python runs the handler of a signal when the main
    thread next checks, not when the signal arrives, and ``signal.signal`` checks first, so
    one that arrived before a handler is swapped is taken by the handler it arrived under:
    noted when it came inside the block, the caller's own when it came just before or after.
    Only one arriving inside ``signal.signal`` itself, between that check and the swap, finds
    the handler being put back -- harmless where that is a Python handler (the command's
    every stop signal, see ``launch.lifecycle.sigterm_raises``), dropped by Python where it
    is the default action (a SIGTERM to a program that calls ``fit()`` without a handler).
    """
    noted: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield noted
        return
    previous = take_over(lambda signum, frame: noted.append(signum),
                         [sig for sig in STOP_SIGNALS if replaceable(sig)])
    try:
        yield noted
    finally:
        put_back(previous)


@contextmanager
def stop_signals_deferred():
    """Run the block whole: a stop signal that arrives meanwhile takes effect right
    after it, whether or not the block raised -- for steps a stop must not split, such as
    putting a checkpoint in place and recording that it is there. Main thread only (where
    Python runs handlers); elsewhere the block is not protected."""
    noted: list[int] = []
    try:
        with stop_signals_noted() as noted:
            yield
    finally:   # the handlers are back in place: the one meant for the signal takes it
        if noted:
            signal.raise_signal(noted[0])
