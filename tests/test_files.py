"""Atomic writes: the umask read without changing it, the folder fsync'd after the rename,
and the files layer below the launcher (it imports nothing from ``mptrain.launch``)."""

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from mptrain import files
from mptrain.errors import Interrupted, UserError
from mptrain.files import atomic_write, umask


@pytest.fixture
def mask():
    old = os.umask(0o027)
    yield 0o027
    os.umask(old)


def test_the_umask_is_read_without_setting_it(tmp_path, mask, monkeypatch):
    def forbidden(value):
        raise AssertionError(f"os.umask({value:o}) called: other threads would see it")

    monkeypatch.setattr(os, "umask", forbidden)
    assert umask() == mask
    atomic_write(tmp_path / "out.txt", lambda handle: handle.write(b"x"))
    assert stat.S_IMODE((tmp_path / "out.txt").stat().st_mode) == 0o640


def test_without_the_proc_line_the_umask_is_still_right(tmp_path, mask):
    status = tmp_path / "status"
    status.write_text("Name:\tpython\nPid:\t1\n")   # a kernel older than 4.7
    assert umask(status) == mask
    assert umask(tmp_path / "absent") == mask
    assert os.umask(mask) == mask                    # left as it was


def test_the_folder_is_fsynced_after_the_rename(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync

    def fsync(fd):
        kind = "folder" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file"
        synced.append((kind, (tmp_path / "out.txt").exists()))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    atomic_write(tmp_path / "out.txt", lambda handle: handle.write(b"x"))
    # The file's data before the rename, then the folder holding the new name after it.
    assert synced == [("file", False), ("folder", True)]


def test_a_folder_that_cannot_be_fsynced_is_not_an_error(tmp_path, monkeypatch):
    def fsync(fd):
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(22, "Invalid argument")

    monkeypatch.setattr(os, "fsync", fsync)
    atomic_write(tmp_path / "out.txt", lambda handle: handle.write(b"x"))
    assert (tmp_path / "out.txt").read_bytes() == b"x"


def test_the_files_layer_imports_nothing_from_the_launcher():
    src = Path(files.__file__).parents[1]
    done = subprocess.run(
        [sys.executable, "-c", "import sys, mptrain.files; "
         "print(sorted(m for m in sys.modules if m.startswith('mptrain.launch')))"],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(src)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


class StoppedMidWrite:
    """A file that takes ``limit`` bytes, then raises ``stop`` from its write: where a stop
    signal's handler raises while torch.save writes a checkpoint."""

    def __init__(self, handle, stop, limit=4096):
        self.handle, self.stop, self.limit, self.written = handle, stop, limit, 0

    def write(self, data):
        self.written += len(data)
        if self.written > self.limit:
            raise self.stop
        return self.handle.write(data)

    def flush(self):
        self.handle.flush()


@pytest.mark.parametrize("stop", [KeyboardInterrupt(), Interrupted(signal.SIGTERM)],
                         ids=["SIGINT", "SIGTERM"])
def test_a_stop_during_torch_save_is_the_stop_not_torchs_error(tmp_path, stop):
    # torch.save's zip writer, closed by the stop, raised RuntimeError ("unexpected pos")
    # from its __exit__: the command printed a traceback and exited 1, without the resume
    # hint, when a SIGTERM landed in a checkpoint being written.
    import torch

    path = tmp_path / "checkpoint.pt"
    path.write_bytes(b"the last complete checkpoint")
    with pytest.raises(type(stop)) as caught:
        atomic_write(path, lambda handle: torch.save({"w": torch.zeros(10_000)},
                                                     StoppedMidWrite(handle, stop)))
    assert caught.value is stop
    assert path.read_bytes() == b"the last complete checkpoint"
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]   # no temp file left


def test_a_full_disk_during_torch_save_is_one_line_not_torchs_error(tmp_path):
    # The zip writer put its RuntimeError ("unexpected pos") in front of the OSError too:
    # a checkpoint on a full disk ended in two tracebacks, not the line that says to free
    # space.
    import errno

    import torch

    path = tmp_path / "checkpoint.pt"
    path.write_bytes(b"the last complete checkpoint")
    full = OSError(errno.ENOSPC, "No space left on device")
    with pytest.raises(UserError, match="could not write .*: No space left on device; free "
                                        "space there"):
        atomic_write(path, lambda handle: torch.save({"w": torch.zeros(10_000)},
                                                     StoppedMidWrite(handle, full)))
    assert path.read_bytes() == b"the last complete checkpoint"
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]


def test_an_error_of_the_writer_alone_is_still_the_writers(tmp_path):
    def failing(handle):
        try:
            raise ValueError("the writer's own")
        finally:
            handle.write(b"partial")

    with pytest.raises(ValueError, match="the writer's own"):
        atomic_write(tmp_path / "out.bin", failing)
    assert list(tmp_path.iterdir()) == []
