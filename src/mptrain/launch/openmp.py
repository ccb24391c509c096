"""Whether this process may still fork workers that run several threads each.

GNU OpenMP, torch's CPU thread pool, starts its threads at the first parallel region run
with more than one thread and keeps them for the life of the process; a child forked after
that waits forever for them at its own first parallel region (measured here: a conv2d never
returns). A process that has run every torch operation on one thread has no such pool, and
its forked children start their own.

``mptrain run`` and ``mptrain rl`` own their process from its start and only load the data
and build the model before their workers train: they keep it on one thread, so that workers
with several threads are forked -- in milliseconds, inheriting the parent's imports and
data -- rather than started by a fork server that must first import torch (a 1-worker,
2-thread run started 3.5-4.5 s later than a 2-worker one by fork; issue 24). A process
mptrain does not own from its start (``fit()`` in the user's interpreter) cannot vouch that
no parallel region ever ran, and uses the fork server for such workers.

``threadpoolctl``-style thread counting cannot tell: numpy's OpenBLAS starts a pool of its
own at import (fork-safe, it handles fork itself), so a count of native threads is not 1 in a
process that never touched OpenMP.
"""

from __future__ import annotations

import torch

_kept_on_one_thread = False


def keep_this_process_on_one_thread() -> None:
    """Called by a command that owns its process, before it runs any torch operation."""
    global _kept_on_one_thread
    torch.set_num_threads(1)
    _kept_on_one_thread = True


def may_have_started_threads() -> None:
    """This process is about to run torch with several threads (``single`` trains in it):
    from now on it cannot fork children that do."""
    global _kept_on_one_thread
    _kept_on_one_thread = False


def can_fork_multithreaded_children() -> bool:
    return _kept_on_one_thread and torch.get_num_threads() == 1
