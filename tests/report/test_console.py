"""The console presenter: no display thread may run while the parent forks its workers; under
torchrun, who says what."""

import io
import threading

import pytest
from rich.console import Console

from mptrain.launch.world import detect_external_world
from mptrain.report.console import ConsolePresenter
from mptrain.launch.launchers import TorchrunLauncher


def presenter():
    return ConsolePresenter(console=Console(file=io.StringIO(), force_terminal=True))


def threads():
    return {t.ident for t in threading.enumerate()}


def test_announcing_a_round_starts_no_thread():
    before = threads()
    shown = presenter()
    shown.start_round(1, 3, 1000)
    # Workers are forked here, after the round is announced and before any progress.
    assert threads() == before
    shown.update(10)
    assert threads() - before, "the display draws from its own thread once progress comes"
    shown.close()
    assert threads() == before


def test_later_rounds_reuse_the_running_display():
    shown = presenter()
    shown.start_round(1, 2, 100)
    shown.update(50)
    running = threads()
    shown.start_round(2, 2, 100)
    shown.update(20)
    assert threads() == running
    shown.close()


def test_a_restart_closes_the_display_before_workers_are_forked_again():
    before = threads()
    shown = presenter()
    shown.start_round(1, 2, 100)
    shown.update(50)
    shown.close()                      # the runner closes it before restarting workers
    shown.start_round(1, 2, 100)
    assert threads() == before
    shown.close()


def test_quiet_never_draws():
    before = threads()
    shown = ConsolePresenter(quiet=True)
    shown.start_round(1, 1, 10)
    shown.update(5)
    assert threads() == before


@pytest.mark.parametrize("rank, local_rank, node, expected", [
    (1, 1, 0, None),                        # another rank of rank 0's node: rank 0 speaks
    (3, 1, 1, None),                        # not its node's first rank: that one speaks
    (2, 0, 1, "mptrain: node 1 (rank 2): only 2 usable cores here\n"),
    (0, 0, 0, "mptrain: torchrun restarted the job\nmptrain: only 2 usable cores here\n"),
])
def test_under_torchrun_each_other_node_says_its_own_notes(capsys, rank, local_rank, node,
                                                          expected):
    world = detect_external_world({"RANK": str(rank), "WORLD_SIZE": "4",
                                   "LOCAL_RANK": str(local_rank), "GROUP_RANK": str(node)})
    presenter = ConsolePresenter(quiet=True, **TorchrunLauncher(world).presenter_role())
    presenter.banner(["sync x4", "more"])
    presenter.update(10, rate=5.0)
    presenter.note("torchrun restarted the job")      # about the job: rank 0 says it
    presenter.machine_note("only 2 usable cores here")
    out, err = capsys.readouterr()
    assert out == ""                        # the run itself is shown by rank 0 alone
    assert err == (expected or "")
