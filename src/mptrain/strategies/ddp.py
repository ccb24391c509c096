"""Data-parallel SGD with DistributedDataParallel semantics: gradients averaged every step.

Two engines, same result up to float summation order, one chosen per worker from the group
it trains in:

- over torch.distributed (gloo on CPU, nccl on GPU, torchrun, several nodes): torch's own
  ``DistributedDataParallel`` (:class:`TorchDDP`);
- between mptrain's own processes on one CPU machine: the gradients are averaged through a
  shared-memory group instead (:class:`SharedMemoryDDP`). On 2 cores, gloo's threads and
  loopback TCP compete with compute every step and cost ~40% of the throughput; the shared
  buffer costs microseconds. Semantics are DDP's: replicas start from rank 0's parameters,
  every rank steps with the mean gradient, so replicas stay bitwise identical.
"""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

from ..comm.base import Group
from ..comm.dist import TorchDistGroup
from ..comm.kind import CommKind
from ..comm.shm import ShmGroup
from ..errors import UserError
from ..errors import setting_name as named   # as the caller spelled the setting
from .base import visible_gpus
from .epochs import EpochStrategy
from .sharded_step import SharedParameters, ShardedStep, worth_sharding


class TorchDDP:
    """torch's DDP: it broadcasts rank 0's state in its constructor, reduces gradients in
    buckets during backward and broadcasts buffers at the next forward."""

    #: torch's DDP lays its gradient buckets out after the parameters at construction.
    may_change_layout = False

    def replica(self, replica: nn.Module, group: Group, device: torch.device) -> nn.Module:
        device_ids = [device.index] if device.type == "cuda" else None
        return DistributedDataParallel(replica, device_ids=device_ids)

    def unwrap(self, replica: nn.Module) -> nn.Module:
        return replica.module

    def after_backward(self, replica: nn.Module, group: Group) -> None:
        pass

    def after_step(self, replica: nn.Module, group: Group) -> None:
        pass


class SharedMemoryDDP:
    """DDP's semantics through a group's collectives, one flat average per step."""

    may_change_layout = True

    def replica(self, replica: nn.Module, group: Group, device: torch.device) -> nn.Module:
        group.broadcast_([p.data for p in replica.parameters()]
                         + [b for b in replica.buffers()], src=0)
        return replica

    def unwrap(self, replica: nn.Module) -> nn.Module:
        return replica

    def after_backward(self, replica: nn.Module, group: Group) -> None:
        group.average_(gradients(replica))

    def after_step(self, replica: nn.Module, group: Group) -> None:
        # DDP semantics: rank 0's buffers (BatchNorm running statistics) are everyone's.
        buffers = [b for b in replica.buffers()]
        if buffers:
            group.broadcast_(buffers, src=0)


class ShardedStepDDP(SharedMemoryDDP):
    """DDP's semantics with one shared copy of the parameters, each rank stepping its chunk
    (``sharded_step``). One engine serves every rank of its process (ranks may take turns in
    one: ``launch.turns``), so each rank's optimizer is found by its replica."""

    may_change_layout = False

    def __init__(self, shared: SharedParameters, config):
        self.shared, self.config = shared, config
        self._steps: dict[int, ShardedStep] = {}   # by id() of the rank's replica

    def replica(self, replica: nn.Module, group: Group, device: torch.device) -> nn.Module:
        # A module of its own (its gradients and buffers are this rank's), whose parameters
        # are the shared ones.
        params = list(replica.parameters())
        with torch.no_grad():
            for param, view in zip(params, self.shared.views(self.shared.flat, params)):
                param.data = view
        self._steps[id(replica)] = ShardedStep(params, self.shared, group, self.config)
        return replica

    def optimizer(self, replica: nn.Module) -> ShardedStep:
        return self._steps[id(replica)]

    def after_backward(self, replica: nn.Module, group: Group) -> None:
        self._steps[id(replica)].reduce_my_chunk(gradients(replica))

    def after_step(self, replica: nn.Module, group: Group) -> None:
        group.barrier()   # every rank's chunk stepped before anyone's next forward
        super().after_step(replica, group)


def gradients(replica: nn.Module) -> list[torch.Tensor]:
    """The gradients a step averages: a trained parameter unused on this rank in this step
    counts as zero, as in DDP."""
    grads = []
    for param in replica.parameters():
        if not param.requires_grad:
            continue
        if param.grad is None:
            param.grad = torch.zeros_like(param)
        grads.append(param.grad)
    return grads


class DDPStrategy(EpochStrategy):
    name = "ddp"
    no_cuda_graphs = "gradients are averaged from hooks while backward runs"
    settings = EpochStrategy.settings | {"ddp_backend", "drop_last"}
    runs_under_torchrun = True
    ranks_take_turns = True

    def __init__(self, config):
        super().__init__(config)
        self.engine: TorchDDP | SharedMemoryDDP | ShardedStepDDP = SharedMemoryDDP()
        #: The one copy of the parameters that every rank trains, where that pays
        #: (``sharded_step``); made by the parent before its workers start.
        self.shared: SharedParameters | None = None

    def prepare(self, model, data=None, plan=None):
        if plan is not None and self._shards(model, plan):
            self.shared = SharedParameters(model, self.config)

    @classmethod
    def comm_kind(cls, config, torchrun_local_ranks):
        if torchrun_local_ranks is not None:
            if config.device != "cuda" and config.ddp_backend == "gloo":
                return CommKind.GLOO   # a flat gloo group (torch's own DDP), asked for
            return super().comm_kind(config, torchrun_local_ranks)
        gpus = visible_gpus() if config.device == "cuda" else 0
        if config.ddp_backend == "nccl" and 0 < gpus < config.workers:
            backend, workers = named("ddp_backend"), named("workers")
            raise UserError(f"{backend} nccl needs a GPU per worker, but {workers} is "
                            f"{config.workers} and {gpus} GPU(s) are visible; use "
                            f"{workers} {gpus} or {backend} auto (shared memory "
                            "when ranks share a GPU)")
        if config.ddp_backend != "auto":
            return CommKind(config.ddp_backend)
        if config.device == "cuda" and config.workers <= gpus:
            return CommKind.NCCL
        # Ranks sharing a GPU: NCCL refuses two ranks on one device ("Duplicate GPU
        # detected"), so their gradients meet in shared host memory, as on CPUs.
        return CommKind.SHM

    def comm_numel(self, model):
        # The start-up broadcast carries parameters and buffers; gradients are fewer.
        return sum(t.numel() for t in list(model.parameters()) + list(model.buffers()))

    def replicas_are_private(self, plan):
        return not plan.comm.is_torch_group   # a torch.distributed group: torch's DDP

    def needs(self, model, data, plan):
        needs = super().needs(model, data, plan)
        if self._shards(model, plan):   # parameters and optimizer state live once, shared
            needs = replace(needs, private_parameter_copies=1)   # the rank's gradients
        return needs

    def replica(self, model, group, device):
        if isinstance(group, TorchDistGroup):
            self.engine = TorchDDP()
        elif self.shared is not None and isinstance(group, ShmGroup):
            if not isinstance(self.engine, ShardedStepDDP):   # one for all ranks in here
                self.engine = ShardedStepDDP(self.shared, self.config)
        else:
            self.engine = SharedMemoryDDP()
        return self.engine.replica(super().replica(model, group, device), group, device)

    def optimizer(self, replica):
        if isinstance(self.engine, ShardedStepDDP):
            return self.engine.optimizer(replica)
        return super().optimizer(replica)

    def may_change_layout(self, replica):
        return self.engine.may_change_layout and super().may_change_layout(replica)

    def unwrap(self, replica):
        return self.engine.unwrap(replica)

    def after_backward(self, replica, group):
        self.engine.after_backward(replica, group)

    def after_step(self, replica, group, step):
        self.engine.after_step(replica, group)

    def describe(self, plan, model):
        if self._shards(model, plan):
            return [f"gradients averaged every step via {plan.comm.value}; one shared copy "
                    "of the parameters, each rank steps its 1/N of them"]
        return [f"gradients averaged every step via {plan.comm.value}"]

    def _shards(self, model, plan) -> bool:
        return plan.comm is CommKind.SHM and worth_sharding(model, self.config, plan.workers)
