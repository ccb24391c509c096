"""Data-parallel SGD with DistributedDataParallel semantics: gradients averaged every step.

Two engines, same result up to float summation order:

- over torch.distributed (gloo on CPU, nccl on GPU, torchrun, several nodes): torch's own
  ``DistributedDataParallel``;
- between mptrain's own processes on one CPU machine: the gradients are averaged through a
  shared-memory group instead. On 2 cores, gloo's threads and loopback TCP compete with
  compute every step and cost ~40% of the throughput; the shared buffer costs microseconds.
  Semantics are DDP's: replicas start from rank 0's parameters, every rank steps with the
  mean gradient, so replicas stay bitwise identical.
"""

from __future__ import annotations

import torch
from torch.nn.parallel import DistributedDataParallel

from ..comm.dist import TORCH_BACKENDS, TorchDistGroup
from .data_parallel import DataParallelStrategy


class DDPStrategy(DataParallelStrategy):
    name = "ddp"
    ranks_take_turns = True

    def comm_numel(self, model):
        # The start-up broadcast carries parameters and buffers; gradients are fewer.
        return sum(t.numel() for t in list(model.parameters()) + list(model.buffers()))

    def replica(self, model, group, device):
        replica = super().replica(model, group, device)
        if isinstance(group, TorchDistGroup):
            device_ids = [device.index] if device.type == "cuda" else None
            # DDP broadcasts rank 0's parameters and buffers in its constructor.
            return DistributedDataParallel(replica, device_ids=device_ids)
        group.broadcast_([p.data for p in replica.parameters()]
                         + [b for b in replica.buffers()], src=0)
        return replica

    def may_change_layout(self, replica):
        # torch's DDP lays its gradient buckets out after the parameters at construction.
        return not isinstance(replica, DistributedDataParallel)

    def replicas_are_private(self, layout):
        return layout.comm not in TORCH_BACKENDS   # a torch.distributed group: torch's DDP

    def unwrap(self, replica):
        return replica.module if isinstance(replica, DistributedDataParallel) else replica

    def after_backward(self, replica, group):
        if isinstance(replica, DistributedDataParallel):
            return  # torch's DDP reduced the gradients during backward
        grads = []
        for param in replica.parameters():
            if not param.requires_grad:
                continue
            if param.grad is None:  # unused in this step on this rank; DDP counts it as zero
                param.grad = torch.zeros_like(param)
            grads.append(param.grad)
        group.average_(grads)

    def after_step(self, replica, group, step):
        if isinstance(replica, DistributedDataParallel):
            return  # torch's DDP broadcasts buffers at the next forward
        # DDP semantics: rank 0's buffers (BatchNorm running statistics) are everyone's.
        buffers = [b for b in replica.buffers()]
        if buffers:
            group.broadcast_(buffers, src=0)

    def describe(self, layout):
        return [f"gradients averaged every step via {layout.comm}"]
