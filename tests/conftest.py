"""What holds in every test process, however the suite was started."""

from __future__ import annotations

import signal

import pytest

from mptrain.signals import STOP_SIGNALS
from xdist_groups import name_groups


def pytest_configure(config):
    children_take_the_stop_signals()


@pytest.hookimpl(trylast=True)   # after --deselect and -k have matched the plain node ids
def pytest_collection_modifyitems(config, items):
    name_groups(config, items)   # the "nodes" group of the torchrun tests, among others


def children_take_the_stop_signals() -> None:
    """The runs the tests start take SIGINT, SIGTERM and SIGHUP as from a terminal.

    A suite started by ``nohup``, or as a background job of a script (``pytest ... &``), has
    SIGHUP or SIGINT ignored, and an ignored signal stays ignored in every child, through
    exec (a blocked one stays blocked likewise). The runs that the tests stop with SIGINT or
    SIGHUP then ran to their end instead, exit 0 for 130 or 129 (issue 57, reported as a stop
    lost under load: it was the suite's start). Each such signal is given a handler that
    does nothing: this process still takes no notice of it, and since exec resets a caught
    signal to its default action, every child starts with the default.
    """
    blocked = set(signal.pthread_sigmask(signal.SIG_BLOCK, [])) if hasattr(
        signal, "pthread_sigmask") else set()
    for sig in STOP_SIGNALS:
        if signal.getsignal(sig) == signal.SIG_IGN or (
                sig in blocked and signal.getsignal(sig) == signal.SIG_DFL):
            signal.signal(sig, _take_no_notice)
    if blocked & set(STOP_SIGNALS):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def _take_no_notice(signum, frame) -> None:
    """What an ignored signal did to this process: nothing."""
