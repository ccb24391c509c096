"""Sharing strategy choice and the /dev/shm pre-flight."""

import resource

import pytest
import torch.multiprocessing as torch_mp

from mptrain.errors import UserError
from mptrain.launch.sharing import check_shm_space, choose_sharing_strategy


@pytest.fixture(autouse=True)
def restore_strategy():
    before = torch_mp.get_sharing_strategy()
    yield
    torch_mp.set_sharing_strategy(before)


def test_auto_keeps_file_descriptor_when_tensors_fit():
    strategy, reason = choose_sharing_strategy("auto", 100)
    assert strategy == "file_descriptor" and "fit" in reason
    assert torch_mp.get_sharing_strategy() == "file_descriptor"


def test_auto_switches_to_file_system_beyond_the_open_file_limit():
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    strategy, reason = choose_sharing_strategy("auto", soft + 10_000)
    assert strategy == "file_system" and "exceed" in reason


def test_explicit_strategy_is_applied():
    assert choose_sharing_strategy("file_system", 1)[0] == "file_system"
    assert torch_mp.get_sharing_strategy() == "file_system"


def test_shm_preflight_refuses_with_the_docker_hint(tmp_path):
    with pytest.raises(UserError, match="--shm-size"):
        check_shm_space(1 << 60, str(tmp_path))
    check_shm_space(1, str(tmp_path))


def test_shared_zeros_are_zeros_in_shared_memory_that_a_forked_child_writes_to():
    import multiprocessing

    import torch

    from mptrain.data.shared import shared_zeros

    table = shared_zeros((3, 5), torch.float64)
    assert table.is_shared() and table.dtype == torch.float64 and table.shape == (3, 5)
    assert torch.equal(table, torch.zeros(3, 5, dtype=torch.float64))

    def write_row():
        table[1] = 7.0

    child = multiprocessing.get_context("fork").Process(target=write_row)
    child.start()
    child.join(timeout=30)
    assert child.exitcode == 0
    assert table[1].tolist() == [7.0] * 5 and table[0].sum() == 0 and table[2].sum() == 0
