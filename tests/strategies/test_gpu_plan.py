"""How strategies place ranks on GPUs: decided without a GPU, so tested everywhere; the
CUDA runs themselves are measured by benchmarks/gpu.py on a GPU machine."""

from types import SimpleNamespace

import pytest
import torch

from mptrain.comm.kind import CommKind
from mptrain.config import TrainConfig
from mptrain.errors import UserError
from mptrain.launch.worker import worker_device
from mptrain.strategies import ddp
from mptrain.strategies.ddp import DDPStrategy
from mptrain.strategies.hogwild import HogwildStrategy
from mptrain.strategies.sync import SyncStrategy


def cuda_config(**settings):
    return TrainConfig.from_settings({"device": "cuda", **settings})


@pytest.mark.parametrize("workers, gpus, kind", [
    (1, 1, CommKind.NCCL),      # a GPU per rank: nccl
    (2, 2, CommKind.NCCL),
    (2, 1, CommKind.SHM),       # two ranks on one GPU: nccl would say "Duplicate GPU"
    (4, 2, CommKind.SHM),
])
def test_ddp_uses_nccl_only_with_a_gpu_per_rank(monkeypatch, workers, gpus, kind):
    monkeypatch.setattr(ddp, "visible_gpus", lambda: gpus)
    config = cuda_config(strategy="ddp", workers=workers)
    assert DDPStrategy.comm_kind(config, None) is kind


def test_ddp_refuses_nccl_asked_for_with_more_ranks_than_gpus(monkeypatch):
    monkeypatch.setattr(ddp, "visible_gpus", lambda: 1)
    config = cuda_config(strategy="ddp", workers=2, ddp_backend="nccl")
    with pytest.raises(UserError, match="--workers 1 or --ddp-backend auto"):
        DDPStrategy.comm_kind(config, None)


def test_without_any_gpu_nccl_is_left_to_preflight_which_says_no_gpu_is_visible(monkeypatch):
    monkeypatch.setattr(ddp, "visible_gpus", lambda: 0)
    config = cuda_config(strategy="ddp", workers=2, ddp_backend="nccl")
    assert DDPStrategy.comm_kind(config, None) is CommKind.NCCL


def test_ddp_on_cpu_never_asks_for_gpus(monkeypatch):
    monkeypatch.setattr(ddp, "visible_gpus", lambda: pytest.fail("asked for GPUs"))
    config = TrainConfig.from_settings({"strategy": "ddp", "workers": 2})
    assert DDPStrategy.comm_kind(config, None) is CommKind.SHM


def plan_for(strategy_class, device="cuda"):
    job = SimpleNamespace(config=SimpleNamespace(device=device), strategy=strategy_class)
    return SimpleNamespace(job=job)


def test_ranks_of_cpu_runs_train_on_the_cpu():
    assert worker_device(3, plan_for(SyncStrategy, "cpu")) == torch.device("cpu")


@pytest.mark.parametrize("rank, gpus, expected", [(0, 2, 0), (1, 2, 1), (2, 2, 0)])
def test_gpus_are_dealt_round_robin_but_hogwild_keeps_its_ranks_on_one(monkeypatch, rank, gpus,
                                                                      expected):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    chosen = []
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    assert worker_device(rank, plan_for(SyncStrategy)) == torch.device("cuda", expected)
    # Hogwild's ranks all update the parent's CUDA parameters, which live on GPU 0.
    assert worker_device(rank, plan_for(HogwildStrategy)) == torch.device("cuda", 0)
    assert chosen == [expected, 0]


@pytest.mark.parametrize("local_ranks, kind", [(1, CommKind.GLOO), (2, CommKind.SHM_GLOO)])
def test_fedavg_under_torchrun_on_gpus_exchanges_host_memory_over_gloo(local_ranks, kind):
    """fedavg's ranks exchange CPU tensors (the global model, sums, update rows) whatever
    the device clients train on; an nccl group would refuse them."""
    from mptrain.strategies.fedavg.strategy import FedAvgStrategy
    from mptrain.strategies.sync import SyncStrategy

    config = cuda_config(strategy="fedavg", workers=2)
    assert FedAvgStrategy.comm_kind(config, local_ranks) is kind
    assert FedAvgStrategy.comm_kind(config, None) is CommKind.SHM
    assert SyncStrategy.comm_kind(config, local_ranks) is CommKind.NCCL   # unchanged
