"""An error in the parent's own handling of a worker's message is the parent's, not the
worker's.

The parent writes checkpoints and outputs as the workers' reports arrive. A full disk there
(``OSError: [Errno 28] No space left on device``) was caught with the errors of reading the
pipe and reported as "worker rank 0 raised the pipe from this worker broke: OSError(28, ...)"
-- blaming a healthy worker, with a "traceback" that was not one.
"""

from __future__ import annotations

import errno
import os

import pytest

from mptrain.launch.supervisor import Supervisor


def report_once(rank, channel):
    channel.send("write a checkpoint")


def disk_full(rank, payload):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "out/.checkpoint.pt.x.tmp")


@pytest.mark.timeout(60)
def test_a_full_disk_while_the_parent_writes_is_raised_to_the_caller_not_blamed_on_a_worker():
    supervisor = Supervisor("fork", on_message=disk_full)
    with pytest.raises(OSError) as raised:
        supervisor.run(report_once, [()])
    assert raised.value.errno == errno.ENOSPC
    # The worker was stopped and reaped on the way out.
    assert all(process.exitcode is not None for process in supervisor._processes)


def test_an_output_that_cannot_be_written_is_one_line_and_the_old_file_stays(tmp_path):
    from mptrain.errors import UserError
    from mptrain.files import atomic_write

    path = tmp_path / "checkpoint.pt"
    path.write_bytes(b"the last complete checkpoint")

    def fill_the_disk(handle):
        handle.write(b"half of the new one")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(UserError) as raised:
        atomic_write(path, fill_the_disk)
    said = str(raised.value)
    assert said == f"could not write {path}: No space left on device; free space there or " \
                   "choose another --out (the file it would have replaced is unchanged)", said
    assert path.read_bytes() == b"the last complete checkpoint"
    assert [item.name for item in tmp_path.iterdir()] == ["checkpoint.pt"]


def test_a_worker_killed_by_sigbus_is_described_with_the_likely_cause():
    """Shared memory is backed page by page as it is first written (fedavg's tables, the
    sharded optimizer's state): when /dev/shm fills up meanwhile, the worker that touches a
    new page dies of SIGBUS, and "was killed by SIGBUS" alone said nothing of why."""
    from mptrain.launch.supervisor import WorkerFailure

    text = WorkerFailure(1, 4242, "signal", -7, signal_name="SIGBUS").describe()
    assert text.startswith("worker rank 1 (pid 4242) was killed by SIGBUS (")
    assert "/dev/shm" in text and "--shm-size" in text
    assert WorkerFailure(1, 4242, "signal", -9, signal_name="SIGKILL").describe() == \
        "worker rank 1 (pid 4242) was killed by SIGKILL"
