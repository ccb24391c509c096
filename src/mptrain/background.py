"""mptrain's background threads: work done ahead of time (an import, a data set read ahead,
a memory sample, a signal sent again), in daemon threads that end without a word.

Such a thread may still be at work when the command exits -- a mistake found right after the
warm-up started leaves it importing torch's optimizer machinery -- and what it then runs
into (an exit handler that shut down what it imports, a module torn down) is no news to the
user: the command said its one line already. Python would print "Exception in thread ...:"
and a traceback under it. Nothing is lost by silence: whoever needs the work does it again
on its own path and sees the error there (the warm-up, the imports, the read-ahead), or
does without it (a memory sample; a signal sent again, see ``launch.lifecycle``).

Being daemons, none of them holds up the exit: the command leaves through ``os._exit``
(``launch.lifecycle.exit_after_cleanup``), and a Python program that called ``fit()`` does
not wait for them either.
"""

from __future__ import annotations

import functools
import threading


def quietly(work):
    """``work`` that ends its thread without a word, whatever it raises."""
    @functools.wraps(work)
    def run(*args, **kwargs):
        try:
            work(*args, **kwargs)
        except BaseException:   # noqa: BLE001 - see the module's docstring
            pass
    return run


def start_daemon(work, name: str, *args) -> threading.Thread:
    """Run ``work(*args)`` in a started daemon thread named ``name`` (see the module)."""
    thread = threading.Thread(target=quietly(work), args=args, name=name, daemon=True)
    thread.start()
    return thread
