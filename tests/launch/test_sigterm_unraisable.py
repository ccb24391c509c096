"""SIGTERM that lands where Python cannot raise (a finaliser, a weakref callback -- the import
system's lock cleanup while torchrun stops a rank that is still importing) still stops the
command, and prints no "Exception ignored in ..." traceback (it did: CI of 2026-11-27,
tests/launch/test_torchrun.py::test_workers_under_torchrun_are_refused_in_one_line)."""

from __future__ import annotations

import os
import signal
import sys
import threading

import pytest

from mptrain.errors import Interrupted
from mptrain.launch.lifecycle import sigterm_raises


class SignalledWhenDropped:
    """Sends SIGTERM from its finaliser: the handler runs inside ``__del__``, where an
    exception cannot propagate."""

    def __init__(self, caught: list):
        self.caught = caught

    def __del__(self):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
        except Interrupted as raised:   # what Python would report as unraisable
            self.caught.append(raised)
            raise


def test_a_sigterm_raised_inside_a_finaliser_is_sent_again_and_stops_the_command(capfd):
    caught: list = []
    previous = sys.unraisablehook
    with pytest.raises(Interrupted):
        with sigterm_raises():
            SignalledWhenDropped(caught)   # dropped at once: its finaliser runs here
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
