"""How mptrain's processes live and end: a worker dies with its parent, ignores Ctrl-C (the
parent owns shutdown) and leaves without running interpreter teardown; the command turns
SIGTERM into an exception, as Ctrl-C is one, and exits once its cleanup is done."""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import sys
import threading
from contextlib import contextmanager

from ..errors import Interrupted

_PR_SET_PDEATHSIG = 1
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def die_with_parent(parent_pid: int | None) -> None:
    """Ask the kernel to SIGKILL this process when its parent dies: no orphans, even after
    the parent is SIGKILLed itself.

    ``parent_pid`` is None under forkserver, whose workers are children of the fork server
    (which itself exits when the run's process goes away).
    """
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass
    if parent_pid is not None and os.getppid() != parent_pid:  # died before prctl
        os._exit(1)


def ignore_interrupts() -> None:
    """Ctrl-C reaches the whole process group; the parent decides how workers stop.

    SIGTERM goes back to the default action: a handler inherited from the parent (the CLI
    turns SIGTERM into an exception) would only run at the worker's next Python line, and a
    worker stuck in native code would then wait for the SIGKILL after the grace period.

    The parent blocks both signals while it starts a worker, and a child inherits that mask
    (through exec too, under spawn): they are unblocked here, once the dispositions above are
    in place, so a SIGTERM sent during the start takes effect now instead of being lost.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


@contextmanager
def stop_signals_held():
    """Hold SIGINT/SIGTERM back in this thread for the block (a no-op where signals cannot be
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
    """While the block runs, SIGINT/SIGTERM only append to the yielded list; the caller
    decides what to do with them after it. Python runs signal handlers in the main thread,
    whichever thread the kernel delivered a signal to (torch's threads among them), so
    masking the signals in this thread alone would not keep a handler out of the block.
    Main thread only: elsewhere Python runs no handlers anyway."""
    noted: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield noted
        return
    previous = {}
    for sig in STOP_SIGNALS:
        handler = signal.getsignal(sig)
        if handler is None or handler == signal.SIG_IGN:
            continue  # installed outside Python, or ignored: leave it be
        previous[sig] = signal.signal(sig, lambda signum, frame: noted.append(signum))
    try:
        yield noted
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def stop_signals_deferred():
    """Run the block whole: a SIGINT/SIGTERM that arrives meanwhile takes effect right
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


def leave(code: int) -> None:
    """Exit now, skipping atexit and destructors.

    Processes that used gloo abort at interpreter exit in about 1 run in 4 ("terminate
    called without an active exception") after their work is done and reported; a finished
    worker must never turn into a failed run because of that.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def exit_after_cleanup(code: int) -> None:
    """Run the exit handlers, flush, and exit without the interpreter's teardown.

    With torch imported, that teardown is a full garbage collection and module clearing over
    a few hundred thousand objects: about a second of every command on a small machine, spent
    after the work is done. ``atexit`` handlers (multiprocessing's, logging's, temporary
    folders') still run, so nothing they own is left behind.
    """
    atexit._run_exitfuncs()
    stop_fork_server()
    leave(code)


def stop_fork_server() -> None:
    """Stop multiprocessing's fork server now instead of letting it outlive the command.

    The server notices only at this process's exit that it is no longer needed, then tears
    down its own copy of torch: 0.5-1 s of CPU after the command has returned, taken from
    whatever runs next (the next cell of a bench). Every worker it forked has been reaped by
    then and it holds nothing that needs a clean shutdown. multiprocessing has no public way
    to stop it; without the private attributes this does nothing.
    """
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    pid = getattr(server, "_forkserver_pid", None)
    if pid is None or not hasattr(server, "_stop"):
        return
    try:
        os.kill(pid, signal.SIGKILL)
        server._stop()  # closes its pipe and reaps it: no zombie
    except (OSError, ChildProcessError):
        pass


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
