"""The rendezvous of mptrain's own gloo/nccl groups: a private file store, no port to race
for, nothing left behind."""

import os
import pickle

from mptrain.comm.dist import DistSpec


def test_each_group_meets_in_its_own_private_folder_and_leaves_nothing():
    first, second = DistSpec("gloo", 2, 30.0), DistSpec("gloo", 2, 30.0)
    try:
        assert first.folder != second.folder
        assert os.path.isdir(first.folder)
        assert os.stat(first.folder).st_mode & 0o077 == 0  # mkdtemp: this user only
        copy = pickle.loads(pickle.dumps(first))  # what spawn'd workers receive
        assert copy.folder == first.folder
    finally:
        first.release()
        second.release()
    assert not os.path.exists(first.folder) and not os.path.exists(second.folder)
    first.release()  # twice is harmless
