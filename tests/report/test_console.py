"""The console presenter: no display thread may run while the parent forks its workers."""

import io
import threading

from rich.console import Console

from mptrain.report.console import ConsolePresenter


def presenter():
    return ConsolePresenter(console=Console(file=io.StringIO(), force_terminal=True))


def threads():
    return {t.ident for t in threading.enumerate()}


def test_announcing_a_round_starts_no_thread():
    before = threads()
    shown = presenter()
    shown.start_epoch(1, 3, 1000)
    # Workers are forked here, after the round is announced and before any progress.
    assert threads() == before
    shown.update(10)
    assert threads() - before, "the display draws from its own thread once progress comes"
    shown.close()
    assert threads() == before


def test_later_rounds_reuse_the_running_display():
    shown = presenter()
    shown.start_epoch(1, 2, 100)
    shown.update(50)
    running = threads()
    shown.start_epoch(2, 2, 100)
    shown.update(20)
    assert threads() == running
    shown.close()


def test_a_restart_closes_the_display_before_workers_are_forked_again():
    before = threads()
    shown = presenter()
    shown.start_epoch(1, 2, 100)
    shown.update(50)
    shown.close()                      # the runner closes it before restarting workers
    shown.start_epoch(1, 2, 100)
    assert threads() == before
    shown.close()


def test_quiet_never_draws():
    before = threads()
    shown = ConsolePresenter(quiet=True)
    shown.start_epoch(1, 1, 10)
    shown.update(5)
    assert threads() == before
