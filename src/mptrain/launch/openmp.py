"""Whether this process may still fork workers that run several threads each.

GNU OpenMP, torch's CPU thread pool, starts its threads at the first parallel region run
with more than one thread and keeps them for the life of the process; a child forked after
that waits forever for them at its own first parallel region (measured here: a conv2d never
returns). A process that has run every torch operation on one thread has no such pool, and
its forked children start their own.

The ``mptrain`` command owns its process from its start (``cli.console``), and ``run`` and
``rl`` only load the data and build the model before their workers train: they keep it on
one thread, so that workers with several threads are forked -- in milliseconds, inheriting
the parent's imports and data -- rather than started by a fork server that must first
import torch (a 1-worker, 2-thread run started 3.5-4.5 s later than a 2-worker one by fork;
issue 24). A process mptrain does not own from its start (``fit()`` or ``cli.main()`` in the
user's interpreter, the tests) cannot vouch that no parallel region ever ran, and uses the
fork server for such workers; its thread count is left alone.

What this cannot see: a user's ``--data``/``--model`` factory that raises the thread count,
runs torch and lowers it again (``mptrain`` then forks workers that hang; give
``--start-method forkserver``), or a build where numpy's OpenBLAS and torch share one GNU
OpenMP. Counting the process's threads cannot tell either: numpy's OpenBLAS starts a pool of
its own at import (fork-safe, it handles fork itself), so a process that never touched
OpenMP has more than one thread.
"""

from __future__ import annotations

import os

_the_command = False          # this process is the `mptrain` command's (``cli.console``)
_kept_on_one_thread = False

# -- how OpenMP's threads wait --------------------------------------------------------------
# GNU OpenMP's threads spin at the end of every parallel region before they sleep: 300,000
# spins (~3 ms) by default, until the next region with OMP_WAIT_POLICY=ACTIVE, none with
# PASSIVE. On a machine whose cores are taken by other work spinning threads steal the cores
# the working ones need (issue 43: a default run beside 2 busy processes took 124 s spinning
# and 30 s passively in a sitting shared with other work); but a region's threads that sleep
# at once pay a futex wake-up at the next one, microseconds away in a small model's step: on
# the quiet machine (2026-11-27, second sitting) a default `mptrain run` took 4.3 s passive
# against 3.1 s spinning, and a fedavg round of the McMahan 2NN at batch 10 on one worker of
# 2 threads 0.55 s passive against 0.19 s. A short spin, GOMP_SPINCOUNT=10000 (~0.1 ms),
# keeps both: the default run 3.2 s quiet and 6.8 s beside 2 busy processes (passive 9.5 s,
# spinning 11.1 s there; one run each, benchmarks/omp_wait_policy.py), the 2NN round 0.20 s.
# The command therefore waits passively after a short spin unless the user chose either
# variable. libgomp reads them once, when torch loads it: only a process that sets them
# before importing torch can choose, which the `mptrain` command does; ``fit()`` in the
# user's interpreter keeps the user's choice. (Builds on Intel's OpenMP read KMP_BLOCKTIME
# instead: left alone.)
WAIT_POLICY = "OMP_WAIT_POLICY"
SPIN_COUNT = "GOMP_SPINCOUNT"
SHORT_SPIN = "10000"
_chose_passive = False


def this_process_is_the_command() -> None:
    """Called by the ``mptrain`` command's entry point, before anything runs (no torch
    import: ``mptrain --help`` stays fast), so the wait policy chosen here is the one
    OpenMP reads."""
    global _the_command, _chose_passive
    _the_command = True
    if WAIT_POLICY not in os.environ and SPIN_COUNT not in os.environ:
        os.environ[WAIT_POLICY] = "PASSIVE"
        os.environ[SPIN_COUNT] = SHORT_SPIN   # libgomp: an explicit count wins over PASSIVE's 0
        _chose_passive = True


def wait_policy_line() -> str | None:
    """A line of the banner where how OpenMP's threads wait may cost the user: only in a
    process mptrain does not own (``fit()``) whose threads spin by OpenMP's default, which
    slows training several times on a machine busy with other work. None where mptrain
    chose (the ``mptrain`` command: a short spin, then sleep) or the user's variables did:
    a line on every run saying so was jargon nobody could act on (issue 57)."""
    if _chose_passive or any(os.environ.get(name) for name in (WAIT_POLICY, SPIN_COUNT)):
        return None
    return (f"worker threads spin while they wait (OpenMP's default): on a machine busy with "
            f"other work, set {WAIT_POLICY}=PASSIVE before importing torch, or use the "
            "mptrain command, which does")


def keep_this_process_on_one_thread() -> None:
    """Called by a command before it runs any torch operation. Nothing happens where the
    command runs inside another program (``cli.main`` called from Python, the tests): that
    process may have run OpenMP threads already, and its thread count is its own."""
    global _kept_on_one_thread
    if not _the_command:
        return
    import torch

    torch.set_num_threads(1)
    _kept_on_one_thread = True


def may_have_started_threads() -> None:
    """This process is about to run torch with several threads (``single`` trains in it):
    from now on it cannot fork children that do."""
    global _kept_on_one_thread
    _kept_on_one_thread = False


def can_fork_multithreaded_children() -> bool:
    """Whether workers with several threads may be forked from this process now."""
    if not _kept_on_one_thread:
        return False
    import torch

    return torch.get_num_threads() == 1
