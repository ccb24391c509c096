"""Tests for mptrain.data.shm_space: /dev/shm's free space, and the synthetic limit that
benchmarks set (``MPTRAIN_SHM_FREE_MIB``)."""

import pytest

from mptrain.data.shm_space import shm_free_bytes
from mptrain.errors import UserError


def test_the_synthetic_limit_lowers_the_free_space(tmp_path, monkeypatch):
    monkeypatch.setenv("MPTRAIN_SHM_FREE_MIB", "1.5")
    assert shm_free_bytes(str(tmp_path)) == 3 * 2**19


@pytest.mark.parametrize("said", ["lots", "inf", "nan", "-1"])
def test_a_synthetic_limit_that_is_no_size_is_one_line(tmp_path, monkeypatch, said):
    monkeypatch.setenv("MPTRAIN_SHM_FREE_MIB", said)
    with pytest.raises(UserError, match=f"MPTRAIN_SHM_FREE_MIB must be a non-negative "
                                        f"number of MiB, got '{said}'"):
        shm_free_bytes(str(tmp_path))
