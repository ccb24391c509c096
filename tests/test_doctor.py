"""mptrain doctor: checks, and cleaning of leftovers from dead runs only."""

import os
import subprocess
import sys

from mptrain.cli import main
from mptrain.doctor import clean_leftovers, find_leftovers, run_checks


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_leftovers_of_dead_processes_are_found_and_cleaned_live_ones_kept(tmp_path):
    dead = tmp_path / f"torch_{dead_pid()}_123_0"
    dead.write_bytes(b"x" * 100)
    live = tmp_path / f"torch_{os.getpid()}_456_0"
    live.write_bytes(b"y")
    other = tmp_path / "psm_abcdef"
    other.write_bytes(b"z")

    found = find_leftovers(tmp_path)
    assert [item.path for item in found] == [dead]
    assert clean_leftovers(found) == (1, 100)
    assert not dead.exists() and live.exists() and other.exists()


def test_checks_cover_the_known_traps(tmp_path):
    names = {check.name for check in run_checks(tmp_path)}
    assert {"shared memory", "open files", "start methods", "leftover segments"} <= names
    assert all(check.status in ("ok", "warn", "fail") for check in run_checks(tmp_path))


def test_doctor_command_runs(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "shared memory" in out and "leftover segments" in out
