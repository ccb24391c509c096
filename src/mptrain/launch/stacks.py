"""Where a hung worker was stuck: its Python stack, asked for before it is stopped.

A worker that makes no progress is stopped by the watchdog; "made no progress for 300 s"
alone leaves the user to guess where. Each worker therefore keeps an anonymous file (a
temporary file already unlinked: nothing to leak, it goes with the process) and has
``faulthandler`` dump every thread's stack into it on ``STACK_SIGNAL``. The handler runs in
C, without the interpreter's lock, so it answers even from inside a blocking call or a
busy C loop. The parent, before it stops a hung worker, sends the signal and reads the file
through ``/proc/<pid>/fd/<fd>``: Linux only; elsewhere the report has no stack.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import tempfile
import time

STACK_SIGNAL = getattr(signal, "SIGUSR2", None)
#: How long the parent waits for a dump: it is written at once by a running process; one in
#: an uninterruptible kernel wait writes nothing and is stopped anyway (a stopped one is not
#: asked).
WAIT_S = 1.0
_POLL_S = 0.02
_kept = []   # the worker's dump file, open for the life of the process


def listen_for_stack_requests() -> int | None:
    """In a worker: dump every thread's stack into an anonymous file on ``STACK_SIGNAL``;
    returns the file's descriptor for the parent (None where this cannot be done)."""
    if STACK_SIGNAL is None or not sys.platform.startswith("linux"):
        return None
    try:
        dump = tempfile.TemporaryFile()
        faulthandler.register(STACK_SIGNAL, file=dump, all_threads=True)
    except (OSError, RuntimeError, ValueError):
        return None
    _kept.append(dump)
    return dump.fileno()


def stack_of(pid: int, fd: int | None) -> str | None:
    """In the parent: the stack of worker ``pid``, whose dump file is its descriptor ``fd``
    (``listen_for_stack_requests``), or None if it gives none within ``WAIT_S``."""
    if fd is None or STACK_SIGNAL is None or _stopped(pid):
        return None
    path = f"/proc/{pid}/fd/{fd}"
    try:
        os.kill(pid, STACK_SIGNAL)
    except OSError:
        return None
    deadline, seen = time.monotonic() + WAIT_S, b""
    while time.monotonic() < deadline:
        try:
            with open(path, "rb") as dump:
                text = dump.read()
        except OSError:
            return None
        # Written whole: the worker's entry frame is in it (the main thread's stack ends
        # there) and nothing more came since the last look.
        if _ENTRY.encode() in text and text == seen:
            break
        seen = text
        time.sleep(_POLL_S)
    return _from_the_worker_down(seen.decode("utf-8", "replace")) or None


def _stopped(pid: int) -> bool:
    """Whether ``pid`` is stopped (SIGSTOP, Ctrl-Z, a debugger): it would take the signal
    only once resumed, and waiting for it would hold up stopping the others, whose
    collectives may time out meanwhile."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in (b"T", b"t")


#: The frame every worker's main thread starts from (``supervisor._bootstrap``).
_ENTRY = "in _bootstrap"


def _from_the_worker_down(dump: str) -> str:
    """``dump`` without the frames below the worker's entry: a forked worker's stack goes
    on into the parent's (the command, the launcher) that forked it."""
    entry = os.path.join("launch", "supervisor.py")
    lines, below = [], False
    for line in dump.rstrip().splitlines():
        if line.startswith(("Thread 0x", "Current thread 0x")):
            below = False
        elif below:
            continue
        lines.append(line)
        below = below or (entry in line and line.rstrip().endswith(" " + _ENTRY))
    return "\n".join(lines)
