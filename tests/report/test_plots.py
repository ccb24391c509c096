"""Figures are written without touching the user's matplotlib backend or pyplot's figures."""

import sys
import threading

import matplotlib

from mptrain.launch import warmup
from mptrain.report.plots import MODULES, plot_curves

ROWS = [{"epoch": 1, "train_loss": 1.0, "test_loss": 1.1, "test_accuracy": 0.5},
        {"epoch": 2, "train_loss": 0.5, "test_loss": None, "test_accuracy": None},
        {"epoch": 3, "train_loss": 0.3, "test_loss": 0.4, "test_accuracy": 0.9}]


def test_curves_are_a_png_and_the_backend_stays_the_users(tmp_path):
    before = matplotlib.get_backend()
    plot_curves(tmp_path / "curves.png", ROWS, "title", "round")
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert matplotlib.get_backend() == before
    pyplot = sys.modules.get("matplotlib.pyplot")
    assert pyplot is None or pyplot.get_fignums() == []   # nothing left open in pyplot


def test_background_imports_are_joined_by_finish():
    warmup.import_in_background([*MODULES, "mptrain.no_such_module"])
    warmup.finish()
    assert all(name in sys.modules for name in MODULES)
    assert not [t for t in threading.enumerate() if t.name == "mptrain-import"]


def test_a_background_import_runs_at_the_lowest_priority_and_the_caller_keeps_its_own():
    import os

    seen = []

    def probe():
        warmup._yield_to_everyone_else()
        seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join(timeout=10)
    assert seen == [19]
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) != 19
