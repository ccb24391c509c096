"""SIGTERM that lands where Python cannot raise (a finaliser, a weakref callback -- the import
system's lock cleanup while torchrun stops a rank that is still importing) still stops the
command, and prints no "Exception ignored in ..." traceback (it did: CI of 2026-11-27,
tests/launch/test_torchrun.py::test_workers_under_torchrun_are_refused_in_one_line). So does
a Ctrl-C: its KeyboardInterrupt was lost there, and the run finished with exit 0 (issue 57)."""

from __future__ import annotations

import os
import signal
import sys
import threading

import pytest

from mptrain.errors import Interrupted
from mptrain.launch.lifecycle import sigterm_raises


class SignalledWhenDropped:
    """Sends ``signum`` from its finaliser: the handler runs inside ``__del__``, where an
    exception cannot propagate."""

    def __init__(self, signum: int, caught: list):
        self.signum, self.caught = signum, caught

    def __del__(self):
        try:
            os.kill(os.getpid(), self.signum)
        except (Interrupted, KeyboardInterrupt) as raised:   # Python reports it unraisable
            self.caught.append(raised)
            raise


@pytest.mark.parametrize("signum, stop", [(signal.SIGTERM, Interrupted),
                                          (signal.SIGINT, KeyboardInterrupt)],
                         ids=["SIGTERM", "SIGINT"])
def test_a_stop_raised_inside_a_finaliser_is_sent_again_and_stops_the_command(capfd, signum,
                                                                              stop):
    caught: list = []
    previous = sys.unraisablehook
    with pytest.raises(stop):
        with sigterm_raises():
            SignalledWhenDropped(signum, caught)   # dropped at once: its finaliser runs here
            assert caught, "the handler did not run inside the finaliser"
            threading.Event().wait(10)     # bounded: the signal comes again from a thread
    assert sys.unraisablehook is previous
    assert "Exception ignored" not in capfd.readouterr().err


def test_other_unraisable_exceptions_still_reach_the_previous_hook(monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)

    class Failing:
        def __del__(self):
            raise ValueError("from a finaliser")

    with sigterm_raises():
        Failing()
    assert [type(u.exc_value) for u in seen] == [ValueError]
