"""Where ranks come from: a torchrun rank is recognised by torchrun's own variables, never
by RANK and WORLD_SIZE alone (common names a shell or another tool leaves behind)."""

import pytest

from mptrain.cli import main
from mptrain.errors import UserError
from mptrain.launch.launchers import WorkerLauncher, choose_launcher
from mptrain.launch.world import ExternalWorld, detect_external_world, stray_rank_variables
from mptrain.strategies.registry import strategy_class

STRAY = {"RANK": "0", "WORLD_SIZE": "2"}


@pytest.mark.parametrize("marker", [{"LOCAL_RANK": "1"}, {"TORCHELASTIC_RUN_ID": "job"}])
def test_a_torchrun_marker_with_rank_and_world_size_is_a_torchrun_rank(marker):
    world = detect_external_world({"RANK": "1", "WORLD_SIZE": "2", "GROUP_RANK": "0",
                                   **marker})
    assert world == ExternalWorld(rank=1, world_size=2, local_rank=int(marker.get(
        "LOCAL_RANK", 0)), node=0)
    assert stray_rank_variables({"RANK": "1", "WORLD_SIZE": "2", **marker}) is None


@pytest.mark.parametrize("environ", [STRAY, {"RANK": "3"}, {"WORLD_SIZE": "4"}])
def test_rank_variables_alone_are_not_torchrun_and_say_so(environ):
    assert detect_external_world(environ) is None
    note = stray_rank_variables(environ)
    assert "not running as a torchrun rank" in note
    assert all(name in note for name in environ)


def test_no_rank_variables_no_note():
    assert detect_external_world({}) is None and stray_rank_variables({}) is None


@pytest.mark.parametrize("environ, words", [
    ({"RANK": "x", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, "RANK='x'"),
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "-1"}, "LOCAL_RANK=-1"),
    ({"RANK": "2", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, "RANK=2 with WORLD_SIZE=2"),
])
def test_malformed_torchrun_variables_are_one_line_errors(environ, words):
    with pytest.raises(UserError, match=words):
        detect_external_world(environ)


def test_the_launcher_carries_the_note_to_the_run(monkeypatch):
    for name, value in STRAY.items():
        monkeypatch.setenv(name, value)
    for name in ("LOCAL_RANK", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    launcher = choose_launcher(strategy_class("sync"))
    assert isinstance(launcher, WorkerLauncher)
    assert [note for note in launcher.join(None, None, None, None).notes
            if "not running as a torchrun rank" in note]


@pytest.mark.timeout(60)
def test_a_run_with_stray_rank_variables_trains_with_its_own_processes(monkeypatch, capsys):
    for name, value in STRAY.items():
        monkeypatch.setenv(name, value)
    for name in ("LOCAL_RANK", "TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    assert main(["run", "--data", "linreg", "--epochs", "1", "--quiet"]) == 0
    _, err = capsys.readouterr()
    assert err.startswith("mptrain: RANK and WORLD_SIZE are set in the environment "
                          "without torchrun's"), err
    assert len(err.splitlines()) == 1, err
