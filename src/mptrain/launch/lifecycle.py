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

from ..background import quietly
from ..errors import Interrupted
from ..signals import STOP_SIGNALS, put_back, replaceable, take_over

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int | None) -> None:
    """Ask the kernel to SIGKILL this process when its parent dies: no orphans, even after
    the parent is SIGKILLed itself.

    ``parent_pid`` is None under forkserver, whose workers are children of the fork server
    (which itself exits when the run's process goes away).
    """
    _die_with(parent_pid, _death_signal_setter())


def _death_signal_setter():
    """``prctl(PR_SET_PDEATHSIG, SIGKILL)`` ready to call, or None where there is none (not
    Linux). Looked up apart from the call: a child between fork and exec may only call it."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return lambda: prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _die_with(parent_pid: int | None, set_death_signal) -> None:
    if set_death_signal is not None:
        set_death_signal()
    if parent_pid is not None and os.getppid() != parent_pid:  # died before prctl
        os._exit(1)


def dies_with_this_process():
    """A ``preexec_fn`` for ``subprocess.Popen``: the child (and the program it runs) is
    SIGKILLed when this process dies, as the workers are (:func:`die_with_parent`). The
    death signal outlives ``exec``; a child of this process is otherwise left running as an
    orphan when this one is SIGKILLed (``mptrain bench``'s timed runs were).

    Between ``fork`` and ``exec`` only async-signal-safe work is safe (other threads may hold
    locks the child would wait for forever): ``prctl`` is looked up here, in the parent, and
    the child only calls it. Call this from the thread that starts the child: the kernel
    sends the signal when that thread ends.
    """
    parent_pid, set_death_signal = os.getpid(), _death_signal_setter()
    return lambda: _die_with(parent_pid, set_death_signal)


def ignore_interrupts() -> None:
    """Ctrl-C reaches the whole process group; the parent decides how workers stop.

    SIGHUP (the terminal closed) is the parent's to act on too: it reaches the whole
    process group, and a worker that died of it would be reported as a failure instead of
    the run being stopped.

    SIGTERM goes back to the default action: a handler inherited from the parent (the CLI
    turns SIGTERM into an exception) would only run at the worker's next Python line, and a
    worker stuck in native code would then wait for the SIGKILL after the grace period.

    The parent blocks both signals while it starts a worker, and a child inherits that mask
    (through exec too, under spawn): they are unblocked here, once the dispositions above are
    in place, so a SIGTERM sent during the start takes effect now instead of being lost.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


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


#: How long after an unraisable stop the signal comes again: long enough for the callback
#: it landed in (microseconds of work) to have returned.
RESEND_AFTER_S = 0.01


@contextmanager
def sigterm_raises():
    """While inside, SIGTERM and SIGHUP raise :class:`Interrupted` in the main thread, as
    Ctrl-C raises KeyboardInterrupt: the run stops the same way for all three (the command
    installs it). A stop signal ignored when the command started stays ignored: SIGHUP
    under nohup, SIGINT in a background job that a script started (``mptrain run ... &``).

    No stop that arrives while inside is lost; how each way of losing one is closed:

    - Where Python cannot raise: a signal can land inside a weakref callback or a finaliser
      (the import system's lock cleanup while torchrun stops a rank that is still importing;
      a tensor's finaliser in the parent's loop). Python would print "Exception ignored
      in ..." and carry on as if no signal had come -- a Ctrl-C too, whose KeyboardInterrupt
      is as unraisable there, and the run then finished with exit 0. Such a stop is caught
      by the unraisable hook and owed: the signal is sent again shortly after, so that it
      lands in the code that runs next (and again, should that be such a place too).
    - The signal sent again goes to the main thread itself (``pthread_kill``), not to the
      process: sent to the process, the kernel may hand it to the thread that sent it, and
      the main thread, asleep in a lock or a wait that only its own signal interrupts, would
      take it only when that wait ended on its own.
    - A stop still owed when the block ends (its signal not yet sent again, or sent and not
      yet taken) is raised as the block ends, instead of coming later, after the handlers
      were put back: a SIGTERM's default action would then end the process where it
      stood, and a stop sent to a process already leaving through ``os._exit`` would not
      come at all.
    - The handlers are taken over and put back whole, even when a pending handler raises
      meanwhile (Python runs pending handlers before it changes one; ``signals.take_over``).
    """
    main_thread = threading.main_thread()
    owed: list[int] = []                 # stops that landed where Python could not raise
    timers: list[threading.Timer] = []
    in_hook = False

    def _raise(signum, frame):
        if in_hook:   # raised here, the hook's own exception would be lost too
            _send_again_later(signum)
            return
        owed.clear()   # a stop is raised now: whatever was owed is paid with it
        raise _stop_for(signum)

    def _send_again_later(signum: int) -> None:
        owed.append(signum)
        # A quiet daemon (``background``): it never holds up the exit; a main thread gone
        # by the time it fires leaves it nothing to do.
        timer = threading.Timer(RESEND_AFTER_S, quietly(signal.pthread_kill),
                                args=(main_thread.ident, signum))
        timer.daemon = True
        timers.append(timer)
        timer.start()

    previous_hook = sys.unraisablehook

    def _owe_it(unraisable):
        nonlocal in_hook
        stop = unraisable.exc_value
        if not isinstance(stop, (Interrupted, KeyboardInterrupt)):
            previous_hook(unraisable)
            return
        in_hook = True
        try:
            _send_again_later(getattr(stop, "signum", signal.SIGINT))
        finally:
            in_hook = False

    # A stop signal ignored when the command started stays ignored: the user (or the shell)
    # asked for it. Python's own Ctrl-C handler is taken over too, for the hook above.
    previous = take_over(_raise, [sig for sig in STOP_SIGNALS if replaceable(sig)])
    sys.unraisablehook = _owe_it
    try:
        yield
    finally:
        try:
            _stop_sending_again(timers)
            if owed:
                raise _stop_for(owed[0])
        finally:
            sys.unraisablehook = previous_hook
            put_back(previous)


def _stop_for(signum: int) -> BaseException:
    return KeyboardInterrupt() if signum == signal.SIGINT else Interrupted(signum)


def _stop_sending_again(timers: list[threading.Timer]) -> None:
    """Cancel every timer and wait until none can still send (each waits 0.01 s at most).
    One that fires meanwhile raises its stop here, in the wait: it is raised once the
    others are done too, so that none sends after the handlers are put back."""
    for timer in timers:
        timer.cancel()
    stop = None
    for timer in timers:
        while timer.is_alive():
            try:
                timer.join()
            except BaseException as raised:   # noqa: BLE001 - raised below
                stop = stop or raised
    if stop is not None:
        raise stop
