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
