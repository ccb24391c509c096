"""mptrain doctor: checks, and cleaning of leftovers from dead runs only."""

import os
import resource
import subprocess
import sys
import tempfile

import pytest

from mptrain import doctor, leftovers
from mptrain.cli import main
from mptrain.doctor import run_checks
from mptrain.launch import start_method


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def old(path):
    """Untouched for longer than leftovers.MIN_AGE_S."""
    os.utime(path, (1, 1))
    return path


def test_leftovers_of_dead_processes_are_found_and_cleaned_live_ones_kept(tmp_path):
    dead = tmp_path / f"torch_{dead_pid()}_123_0"
    dead.write_bytes(b"x" * 100)
    old(dead)
    live = tmp_path / f"torch_{os.getpid()}_456_0"
    live.write_bytes(b"y")
    old(live)
    other = tmp_path / "psm_abcdef"
    other.write_bytes(b"z")
    old(other)

    found = leftovers.find_segments(tmp_path)
    assert [item.path for item in found] == [dead]
    done = leftovers.clean(found)
    assert (done.removed, done.freed, done.others, done.failed) == (1, 100, [], [])
    assert not dead.exists() and live.exists() and other.exists()


def test_a_recent_segment_of_a_pid_not_seen_here_is_kept(tmp_path):
    """Its creator may be alive in another PID namespace (a container sharing /dev/shm)."""
    recent = tmp_path / f"torch_{dead_pid()}_1_0"
    recent.write_bytes(b"x")
    assert leftovers.find_segments(tmp_path) == []
    assert recent.exists()


def test_other_users_leftovers_are_reported_in_one_line_and_never_touched(tmp_path,
                                                                          monkeypatch):
    theirs = tmp_path / f"torch_{dead_pid()}_1_0"
    theirs.write_bytes(b"x")
    old(theirs)
    found = leftovers.find_segments(tmp_path)
    uid = os.getuid()
    monkeypatch.setattr(leftovers, "current_uid", lambda: uid + 1)
    monkeypatch.setattr(os, "unlink", lambda *a, **k: pytest.fail("unlinked another's file"))
    done = leftovers.clean(found)
    assert theirs.exists() and done.removed == 0
    assert done.lines() == ["removed 0 leftover(s), 0.0 MiB freed",
                            f"left 1 leftover(s) of other users alone (uid {uid}); they or "
                            "root can remove them"]


def test_a_leftover_that_cannot_be_removed_is_reported_not_raised(tmp_path, monkeypatch):
    stuck = tmp_path / f"mptrain-node-{dead_pid()}-0"
    stuck.write_bytes(b"x")
    old(stuck)

    def unlink(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "unlink", unlink)
    done = leftovers.clean(leftovers.find_segments(tmp_path))
    assert done.removed == 0 and done.lines()[-1] == \
        f"could not remove {stuck} (Permission denied)"


def test_a_symbolic_link_is_never_a_leftover(tmp_path):
    target = tmp_path / "target"
    target.write_bytes(b"keep")
    link = tmp_path / f"torch_{dead_pid()}_1_0"
    link.symlink_to(target)
    assert leftovers.find_segments(tmp_path, min_age_s=0) == []


def test_stale_temp_files_in_out_are_found_fresh_ones_and_outputs_kept(tmp_path):
    stale = old(_touch(tmp_path / ".checkpoint.pt.abc123.tmp"))
    probe = old(_touch(tmp_path / ".mptrain-probe-xyz"))
    fresh = _touch(tmp_path / ".summary.json.def456.tmp")       # a write in progress
    output = old(_touch(tmp_path / "model.pt"))
    found = leftovers.find_temp_files(tmp_path)
    assert sorted(item.path for item in found) == sorted([stale, probe])
    assert leftovers.clean(found).removed == 2
    assert fresh.exists() and output.exists() and not stale.exists()


def test_a_killed_federated_runs_scratch_state_is_found_a_mapped_one_kept(tmp_path):
    # personal-state.f32 / scaffold-client-controls.f32: a run removes them as it ends,
    # a SIGKILLed one (the OOM killer's, on 7.4 GiB of Ditto rows) left them for good.
    import mmap

    scratch = [old(_touch(tmp_path / name)) for name in leftovers.SCRATCH_FILES]
    fresh_out = tmp_path / "fresh"
    fresh_out.mkdir()
    fresh = _touch(fresh_out / leftovers.PERSONAL_STATE_FILE)   # a run writing it now
    assert leftovers.find_temp_files(fresh_out) == []
    with open(scratch[0], "r+b") as handle:
        handle.write(b"rows")
        handle.flush()
        mapping = mmap.mmap(handle.fileno(), 0)   # a live run's workers map it
    old(scratch[0])
    try:
        assert [item.path for item in leftovers.find_temp_files(tmp_path)] == scratch[1:]
    finally:
        mapping.close()
    found = leftovers.find_temp_files(tmp_path)
    assert sorted(item.path for item in found) == sorted(scratch)
    assert leftovers.clean(found).removed == 2 and fresh.exists()


def test_the_scratch_names_are_the_ones_the_runs_write():
    from mptrain.federated.personal.store import STORE_FILE
    from mptrain.strategies.fedavg.shared import CONTROLS_FILE

    assert {STORE_FILE, CONTROLS_FILE} == set(leftovers.SCRATCH_FILES)


def test_rendezvous_folders_of_dead_runs_are_found(tmp_path):
    dead = tmp_path / f"mptrain-rendezvous-{dead_pid()}-abc"
    live = tmp_path / f"mptrain-rendezvous-{os.getpid()}-def"
    for folder in (dead, live):
        folder.mkdir()
        _touch(folder / "store")
        old(folder)
    found = leftovers.find_rendezvous(tmp_path)
    assert [item.path for item in found] == [dead]
    assert leftovers.clean(found).removed == 1
    assert not dead.exists() and live.exists()


def test_doctor_clean_removes_only_the_callers_dead_leftovers(tmp_path, monkeypatch, capsys):
    shm, temp, out = tmp_path / "shm", tmp_path / "tmp", tmp_path / "out"
    for folder in (shm, temp, out):
        folder.mkdir()
    monkeypatch.setattr(leftovers, "SHM_DIR", shm)
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    segment = old(_touch(shm / f"torch_{dead_pid()}_1_0"))
    rendezvous = temp / f"mptrain-rendezvous-{dead_pid()}-x"
    rendezvous.mkdir()
    old(rendezvous)
    temp_file = old(_touch(out / ".metrics.jsonl.q1w2.tmp"))
    assert main(["doctor", "--clean", "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert "removed 3 leftover(s)" in said, said
    assert not segment.exists() and not rendezvous.exists() and not temp_file.exists()


def _touch(path):
    path.write_bytes(b"")
    return path


GIB = 2**30


def fake_statvfs(total_bytes, free_bytes):
    def statvfs(path):
        return os.statvfs_result((4096, 4096, total_bytes // 4096, free_bytes // 4096,
                                  free_bytes // 4096, 1000, 900, 900, 0, 255))
    return statvfs


def trap(monkeypatch, tmp_path, *, shm=(8 * GIB, 6 * GIB), nofile=(1024, 1 << 20),
         methods=("fork", "spawn", "forkserver"), cuda_initialised=False, autograd_threads=False,
         driver_initialised=False, dead_segment=False):
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
    monkeypatch.setattr(start_method, "autograd_device_threads_started", lambda: autograd_threads)
    monkeypatch.setattr(start_method, "cuda_driver_initialised", lambda: driver_initialised)
    if dead_segment:
        segment = tmp_path / f"torch_{dead_pid()}_1_0"
        segment.write_bytes(b"x" * 2048)
        old(segment)


HEALTHY = {"shared memory": "ok", "open files": "ok", "start methods": "ok", "CUDA": "ok",
           "threads": "ok", "leftovers": "ok"}


@pytest.mark.parametrize("case, expected, advice", [
    # Unpatched, only what holds wherever these tests run: Linux has fork, and an empty
    # folder holds no leftovers.
    (None, {"start methods": "ok", "leftovers": "ok"}, {}),
    (dict(), {}, {}),
    (dict(shm=(64 * 2**20, 60 * 2**20)), {"shared memory": "warn"},
     {"shared memory": "--shm-size"}),                     # Docker's default /dev/shm
    (dict(shm=None), {"shared memory": "warn"}, {}),        # no /dev/shm at all
    (dict(nofile=(1024, 1024)), {"open files": "warn"}, {"open files": "ulimit -Hn"}),
    (dict(nofile=(1024, resource.RLIM_INFINITY)), {}, {}),  # mptrain raises the soft limit
    (dict(methods=("spawn",)), {"start methods": "warn"}, {"start methods": "__main__"}),
    (dict(cuda_initialised=True), {"CUDA": None, "CUDA before fork": "fail"},
     {"CUDA before fork": "spawn"}),
    (dict(autograd_threads=True), {"GPU state before fork": "warn"},
     {"GPU state before fork": "fork server"}),
    (dict(driver_initialised=True), {"GPU state before fork": "warn"},
     {"GPU state before fork": "fork server"}),
    (dict(dead_segment=True), {"leftovers": "warn"},
     {"leftovers": "mptrain doctor --clean"}),
], ids=["this-machine", "healthy", "small-shm", "no-shm", "low-hard-nofile",
        "unlimited-hard-nofile", "no-fork", "cuda-before-fork", "autograd-before-fork",
        "driver-before-fork", "leftover-segment"])
def test_checks_cover_the_known_traps(monkeypatch, tmp_path, case, expected, advice):
    if case is not None:
        trap(monkeypatch, tmp_path, **case)
    checks = {check.name: check for check in run_checks(tmp_path, temp_dir=tmp_path)}

    statuses = {name: check.status for name, check in checks.items()}
    assert {"shared memory", "open files", "start methods", "leftovers"} \
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


@pytest.mark.parametrize("case, reason", [
    (dict(autograd_threads=True), start_method.AUTOGRAD_THREADS),
    (dict(driver_initialised=True), start_method.CUDA_DRIVER),
], ids=["autograd-threads", "driver"])
def test_the_gpu_state_row_says_which_reason(monkeypatch, tmp_path, case, reason):
    trap(monkeypatch, tmp_path, **case)
    checks = {check.name: check for check in run_checks(tmp_path, temp_dir=tmp_path)}
    assert checks["GPU state before fork"].detail == reason


def test_doctor_command_runs(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "shared memory" in out and "leftovers" in out


def test_a_failed_check_is_exit_code_1(monkeypatch, capsys):
    # click hands a command's Exit(1) back as a return value when it is not standalone;
    # it was dropped, and a machine that failed a check (or a bench whose every run
    # failed) exited 0.
    failing = [doctor.Check("shared memory", "fail", "/dev/shm: 1 MiB free", "grow it")]
    monkeypatch.setattr(doctor, "run_checks", lambda **_: failing)
    assert main(["doctor"]) == 1
    assert "FAIL shared memory" in capsys.readouterr().out
    monkeypatch.setattr(doctor, "run_checks", lambda **_: [])
    assert main(["doctor"]) == 0


def test_an_out_folder_that_does_not_exist_is_refused(tmp_path, capsys):
    # A misspelled --out was "ok: none of yours from dead runs": no folder, nothing found.
    with pytest.raises(SystemExit) as exit_:
        main(["doctor", "--out", str(tmp_path / "no-such-run")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mptrain: error:") and "does not exist" in err and "\n" not in err
