"""The /dev/shm buffers of torchrun's ranks on one node: names nobody can guess or take
first, created exclusively for this user only, mapped only when they are the leader's."""

import os
import stat

import pytest
import torch

from mptrain import leftovers
from mptrain.launch.node_memory import NodeMemory, new_token, remove_orphans


@pytest.fixture
def open_umask():
    old = os.umask(0)
    yield
    os.umask(old)


def test_names_are_unguessable_and_files_private_whatever_the_umask(tmp_path, open_umask):
    first = NodeMemory(os.getpid(), True, new_token(), folder=tmp_path)
    second = NodeMemory(os.getpid(), True, new_token(), folder=tmp_path)
    first.allocate(4)
    second.allocate(4)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert len(names) == 2 and names[0] != names[1]      # same leader pid, same count
    for name in names:
        token = name.split("-")[3]
        assert len(token) >= 32 and int(token, 16) >= 0   # 128 random bits
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600
    first.unlink_all()
    second.unlink_all()


def test_the_leader_never_uses_a_name_someone_else_made(tmp_path):
    token = new_token()
    target = tmp_path / "victim"
    target.write_bytes(b"keep")
    (tmp_path / f"mptrain-node-{os.getpid()}-{token}-0").symlink_to(target)
    leader = NodeMemory(os.getpid(), True, token, folder=tmp_path)
    with pytest.raises(RuntimeError, match="exists already"):
        leader.allocate(16)
    assert target.read_bytes() == b"keep"


@pytest.mark.parametrize("plant", ["symlink", "other-user", "other-size"])
def test_a_rank_maps_only_its_leaders_buffer(tmp_path, monkeypatch, plant):
    token = new_token()
    path = tmp_path / f"mptrain-node-{os.getpid()}-{token}-0"
    if plant == "symlink":
        (tmp_path / "elsewhere").write_bytes(bytes(16))
        path.symlink_to(tmp_path / "elsewhere")
    else:
        path.write_bytes(bytes(16 if plant == "other-user" else 8))
    if plant == "other-user":
        uid = os.getuid()
        monkeypatch.setattr(leftovers, "current_uid", lambda: uid + 1)
    follower = NodeMemory(os.getpid(), False, token, folder=tmp_path)
    with pytest.raises(RuntimeError, match="not the node leader's buffer|cannot be opened"):
        follower.allocate(16)


def test_a_follower_maps_the_file_it_checked(tmp_path):
    token = new_token()
    leader = NodeMemory(os.getpid(), True, token, folder=tmp_path)
    written = leader.allocate(8)
    written.fill_(7)
    seen = NodeMemory(os.getpid(), False, token, folder=tmp_path).allocate(8)
    leader.unlink_all()
    assert torch.equal(seen, torch.full((8,), 7, dtype=torch.uint8))


def test_a_foreign_or_unremovable_orphan_never_stops_a_leader(tmp_path, monkeypatch):
    dead = 2 ** 22 + 12345
    for name in (f"mptrain-node-{dead}-0", f"mptrain-node-{dead}-1"):
        (tmp_path / name).write_bytes(b"x")
        os.utime(tmp_path / name, (1, 1))
    real_unlink = os.unlink

    def unlink(path, *args, **kwargs):
        if str(path).endswith("-1"):
            raise PermissionError(13, "Permission denied")
        real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", unlink)
    done = remove_orphans(tmp_path)
    assert done.removed == 1 and [str(p) for p, _ in done.failed] == \
        [str(tmp_path / f"mptrain-node-{dead}-1")]
    uid = os.getuid()
    monkeypatch.setattr(leftovers, "current_uid", lambda: uid + 1)   # all others' now
    leader = NodeMemory(os.getpid(), True, new_token(), folder=tmp_path)
    assert (tmp_path / f"mptrain-node-{dead}-1").exists()            # not touched
    leader.allocate(4)
    leader.unlink_all()
