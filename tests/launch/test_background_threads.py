"""No background thread of mptrain prints when the command exits early.

A mistake found after the warm-up thread started (``--dp-noise`` without ``--sampling
poisson``) gave its one line, then "Exception in thread mptrain-warmup:" and a traceback:
the thread, still importing torch's optimizer machinery, failed while the command exited.
Every background thread (the warm-up, the background imports, the MNIST read-ahead, the
bench's memory sampler) now ends quietly: its work is only ahead of time, and the caller
does it again, or does without it, on its own path.

Deterministic: the thread is held (a stand-in for its work waits on an event) until the
command's exit handlers run, and only then fails.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

#: The command's one line for the mistake below.
ONE_LINE = "mptrain: error: --dp-noise needs --sampling poisson"

HELD_THEN_FAILING = textwrap.dedent("""
    import atexit, sys, threading
    from mptrain.launch import warmup
    {patch}
    sys.argv = ["mptrain", "run", "--strategy", "fedavg", "--dp-clip", "0.5",
                "--dp-noise", "1.0", "--target-epsilon", "2", "--out", {out!r}]
    from mptrain.cli import console
    console()
""")

#: The warm-up's work waits until the command exits, then fails as an import does when the
#: interpreter is shutting down under it.
WARMUP = textwrap.dedent("""
    exiting, failed = threading.Event(), threading.Event()
    def fail_once_exiting():
        exiting.wait(60)
        try:
            raise RuntimeError("cannot schedule new futures after interpreter shutdown")
        finally:
            failed.set()
    warmup._build_an_optimizer = fail_once_exiting
    def at_exit():
        exiting.set()
        failed.wait(60)
        for thread in threading.enumerate():   # whatever the thread prints is out by now
            if thread.name == "mptrain-warmup":
                thread.join(60)
    atexit.register(at_exit)
""")

#: The same for a background import (the curves' modules).
IMPORTS = textwrap.dedent("""
    exiting = threading.Event()
    def fail_once_exiting(modules):
        exiting.wait(60)
        raise SystemError("import of a module torn down at exit")
    warmup._import = fail_once_exiting
    warmup.import_in_background(["matplotlib"])
    def at_exit():
        exiting.set()
        for thread in threading.enumerate():
            if thread.name == "mptrain-import":
                thread.join(60)
    atexit.register(at_exit)
""")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("patch", [WARMUP, IMPORTS], ids=["warm-up", "imports"])
def test_a_command_that_exits_early_prints_its_one_line_and_nothing_from_a_thread(
        tmp_path, patch):
    script = HELD_THEN_FAILING.format(patch=patch, out=str(tmp_path / "out"))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=100, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith(ONE_LINE), \
        done.stderr


def test_the_memory_sampler_ends_quietly_when_its_process_tree_cannot_be_read(monkeypatch):
    import psutil

    from mptrain.bench import memory

    def unreadable(pid):
        raise psutil.AccessDenied(pid)

    monkeypatch.setattr(memory.psutil, "Process", unreadable)
    seen = []
    monkeypatch.setattr(memory.threading, "excepthook", seen.append)
    sampler = memory.TreeMemorySampler(1)
    sampler.start()
    sampler.stop()
    assert (seen, sampler.peak_rss) == ([], 0)
