"""A SIGKILLed ``mptrain bench`` takes the run it was timing with it.

Each bench cell is an ``mptrain run`` started with ``subprocess``; its workers die with it
(``PR_SET_PDEATHSIG``), but the run itself was not tied to the bench: SIGKILL the bench and
the run went on training as an orphan, to its end, writing into a temp folder nobody reads.
Here the cell's command is a child that would sleep for a minute: it must be gone within
seconds of the bench's SIGKILL, and the folder the bench made for it is a leftover that
``mptrain doctor --clean`` finds and removes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import psutil
import pytest

from mptrain import leftovers
from run_watch import poll

START_S = 60.0   # the bench script imports mptrain and starts its cell (2 loaded cores)
GONE_S = 5.0     # bench SIGKILLed -> its cell's run gone

BENCH = textwrap.dedent("""
    import sys
    from mptrain.bench import execute
    from mptrain.bench.matrix import Cell

    # The cell's run: a process that outlives the test unless it dies with the bench.
    execute.command_for = lambda cell, workload, out: [
        sys.executable, "-c", "import time; time.sleep(60)"]
    execute.run_cell(Cell("sync", 2), 0, execute.Workload(run_options=[], epochs=1))
""")


@pytest.fixture
def sigkilled_bench(tmp_path):
    """Start the bench (its temp folder: ``tmp_path``), SIGKILL it once its cell runs;
    yields the cell's processes. Whatever is left alive goes at teardown."""
    bench = subprocess.Popen([sys.executable, "-c", BENCH], start_new_session=True,
                             env=dict(os.environ, TMPDIR=str(tmp_path)))
    cells = []
    try:
        cells = poll(lambda: psutil.Process(bench.pid).children(), START_S) or []
        assert cells and bench.poll() is None, "the bench started no cell"
        os.kill(bench.pid, signal.SIGKILL)
        bench.wait(timeout=10)
        yield cells
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait(timeout=10)
        for cell in cells:
            try:
                cell.kill()
            except psutil.NoSuchProcess:
                pass


@pytest.mark.timeout(90)
def test_the_run_of_a_bench_cell_dies_with_the_sigkilled_bench(sigkilled_bench):
    cells = sigkilled_bench
    gone = poll(lambda: not any(_alive(cell) for cell in cells), GONE_S)
    assert gone, f"the cell's run outlived the SIGKILLed bench: {[c.pid for c in cells]}"


@pytest.mark.timeout(90)
def test_the_folder_of_a_sigkilled_bench_is_a_leftover_doctor_removes(sigkilled_bench,
                                                                      tmp_path):
    made = [path for path in tmp_path.iterdir() if path.name.startswith("mptrain-bench-")]
    assert len(made) == 1, made
    found = leftovers.find_bench_folders(tmp_path, min_age_s=0)
    assert [item.path for item in found] == made
    assert leftovers.clean(found).removed == 1
    assert not made[0].exists()


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
