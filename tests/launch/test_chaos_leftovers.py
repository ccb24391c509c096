"""A segment whose creator is gone may still be in use: it is not a leftover.

torch's ``file_system`` sharing names a segment after the process that made it; another
process keeps it mapped after that one exits (a DataLoader worker's batch in the main
process, a tensor a finished worker shared). ``mptrain doctor --clean`` removed such a
segment once it was 10 minutes old; the process holding it then failed to hand the tensor to
any new process ("unable to open shared memory object ... No such file or directory").
Anything a process here maps or holds open is in use, whoever created it.
"""

from __future__ import annotations

import mmap
import os
import subprocess
import sys

from mptrain import leftovers


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def stale(path):
    path.write_bytes(b"\0" * mmap.PAGESIZE)
    os.utime(path, (1, 1))   # untouched for far longer than leftovers.MIN_AGE_S
    return path


def test_a_segment_mapped_by_a_live_process_is_not_a_leftover(tmp_path):
    segment = stale(tmp_path / f"torch_{dead_pid()}_123_0")
    with open(segment, "r+b") as handle:
        mapping = mmap.mmap(handle.fileno(), 0)
    # Only mapped now, as torch's segments are: the descriptor is closed.
    try:
        assert leftovers.find_segments(tmp_path, min_age_s=0) == []
    finally:
        mapping.close()
    assert [item.path for item in leftovers.find_segments(tmp_path, min_age_s=0)] == [segment]


def test_a_temp_file_held_open_by_a_live_writer_is_not_a_leftover(tmp_path):
    temp = stale(tmp_path / ".checkpoint.pt.abc123.tmp")
    with open(temp, "ab"):
        assert leftovers.find_temp_files(tmp_path, min_age_s=0) == []
    assert [item.path for item in leftovers.find_temp_files(tmp_path, min_age_s=0)] == [temp]


def test_a_rendezvous_folder_with_a_file_held_open_is_not_a_leftover(tmp_path):
    folder = tmp_path / f"mptrain-rendezvous-{dead_pid()}-abc"
    folder.mkdir()
    store = stale(folder / "store")
    os.utime(folder, (1, 1))
    with open(store, "rb"):
        assert leftovers.find_rendezvous(tmp_path, min_age_s=0) == []
    assert [item.path for item in leftovers.find_rendezvous(tmp_path, min_age_s=0)] == [folder]
