"""mptrain doctor: checks, and cleaning of leftovers from dead runs only."""

import os
import resource
import subprocess
import sys

import pytest

from mptrain import doctor
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


GIB = 2**30


def fake_statvfs(total_bytes, free_bytes):
    def statvfs(path):
        return os.statvfs_result((4096, 4096, total_bytes // 4096, free_bytes // 4096,
                                  free_bytes // 4096, 1000, 900, 900, 0, 255))
    return statvfs


def trap(monkeypatch, tmp_path, *, shm=(8 * GIB, 6 * GIB), nofile=(1024, 1 << 20),
         methods=("fork", "spawn", "forkserver"), cuda_initialised=False, dead_segment=False):
    """One machine, as the checks see it: every probe answers what the case says."""
    if shm is None:
        def statvfs(path):
            raise FileNotFoundError(path)
        monkeypatch.setattr(doctor.os, "statvfs", statvfs)
    else:
        monkeypatch.setattr(doctor.os, "statvfs", fake_statvfs(*shm))
    monkeypatch.setattr(doctor.resource, "getrlimit", lambda which: nofile)
    monkeypatch.setattr(doctor.multiprocessing, "get_all_start_methods", lambda: list(methods))
    monkeypatch.setattr(doctor.torch.cuda, "is_initialized", lambda: cuda_initialised)
    if dead_segment:
        (tmp_path / f"torch_{dead_pid()}_1_0").write_bytes(b"x" * 2048)


HEALTHY = {"shared memory": "ok", "open files": "ok", "start methods": "ok", "CUDA": "ok",
           "threads": "ok", "leftover segments": "ok"}


@pytest.mark.parametrize("case, expected, advice", [
    # Unpatched, only what holds wherever these tests run: Linux has fork, and an empty
    # folder holds no leftovers.
    (None, {"start methods": "ok", "leftover segments": "ok"}, {}),
    (dict(), {}, {}),
    (dict(shm=(64 * 2**20, 60 * 2**20)), {"shared memory": "warn"},
     {"shared memory": "--shm-size"}),                     # Docker's default /dev/shm
    (dict(shm=None), {"shared memory": "warn"}, {}),        # no /dev/shm at all
    (dict(nofile=(1024, 1024)), {"open files": "warn"}, {"open files": "ulimit -Hn"}),
    (dict(nofile=(1024, resource.RLIM_INFINITY)), {}, {}),  # mptrain raises the soft limit
    (dict(methods=("spawn",)), {"start methods": "warn"}, {"start methods": "__main__"}),
    (dict(cuda_initialised=True), {"CUDA": None, "CUDA before fork": "fail"},
     {"CUDA before fork": "spawn"}),
    (dict(dead_segment=True), {"leftover segments": "warn"},
     {"leftover segments": "mptrain doctor --clean"}),
], ids=["this-machine", "healthy", "small-shm", "no-shm", "low-hard-nofile",
        "unlimited-hard-nofile", "no-fork", "cuda-before-fork", "leftover-segment"])
def test_checks_cover_the_known_traps(monkeypatch, tmp_path, case, expected, advice):
    if case is not None:
        trap(monkeypatch, tmp_path, **case)
    checks = {check.name: check for check in run_checks(tmp_path)}

    statuses = {name: check.status for name, check in checks.items()}
    assert {"shared memory", "open files", "start methods", "leftover segments"} \
        <= set(statuses)
    if case is None:
        assert {name: statuses[name] for name in expected} == expected
    else:
        assert statuses == {name: status for name, status in {**HEALTHY, **expected}.items()
                            if status is not None}
    for name, words in advice.items():
        assert words in checks[name].advice, checks[name]
    for check in checks.values():  # a check that is not ok says what to do about it
        assert bool(check.advice) == (check.status != "ok"), check


def test_doctor_command_runs(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "shared memory" in out and "leftover segments" in out
