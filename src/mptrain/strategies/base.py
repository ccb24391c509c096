"""The narrow interface every strategy implements.

The training loop (``engine.loop``) is the same for all strategies; a strategy only decides
the points where algorithms really differ:

- ``prepare``      (parent, once)   what must live in shared memory before workers start;
- ``replica``      (worker, once)   which model object this worker trains;
- ``after_backward`` (every step)   e.g. DDP averages gradients here;
- ``after_step``   (every step)     e.g. local SGD averages parameters every N steps;
- ``end_epoch``    (every epoch)    make the model the strategy produces consistent;
- ``publish``      (every epoch)    put that model where the parent can read it.
"""

from __future__ import annotations

import copy

import torch
import torch.nn as nn

from ..comm.base import Group
from ..config import TrainConfig
from ..engine.optim import build_optimizer


class Strategy:
    name = "base"
    #: False for strategies that train in the calling process (``single``).
    uses_worker_processes = True

    def __init__(self, config: TrainConfig):
        self.config = config

    # -- parent side ------------------------------------------------------------------------
    def prepare(self, model: nn.Module) -> None:
        """Called in the parent before any worker starts; ``model`` is already shared."""

    def comm_numel(self, model: nn.Module) -> int:
        """How many numbers one rank contributes to the largest collective."""
        return 0

    # -- worker side ------------------------------------------------------------------------
    def replica(self, model: nn.Module, group: Group, device: torch.device) -> nn.Module:
        """A private copy by default: workers must not write each other's parameters."""
        return copy.deepcopy(model).to(device)

    def unwrap(self, replica: nn.Module) -> nn.Module:
        """The plain module behind ``replica`` (for evaluation and publishing)."""
        return replica

    def optimizer(self, replica: nn.Module) -> torch.optim.Optimizer:
        c = self.config
        return build_optimizer(replica.parameters(), c.optimizer, c.lr, c.momentum,
                               c.weight_decay)

    def restore_optimizer(self, optimizer: torch.optim.Optimizer, state: dict) -> None:
        optimizer.load_state_dict(state)

    def after_backward(self, replica: nn.Module, group: Group) -> None:
        pass

    def after_step(self, replica: nn.Module, group: Group, step: int) -> None:
        pass

    def end_epoch(self, replica: nn.Module, group: Group, steps: int) -> None:
        pass

    def publish(self, replica: nn.Module, shared_model: nn.Module, group: Group) -> None:
        """Rank 0 copies its replica into the parent's shared model (all replicas are equal)."""
        if group.rank == 0:
            copy_model_state(self.unwrap(replica), shared_model)


def floating_state(model: nn.Module) -> list[torch.Tensor]:
    """Parameters and floating-point buffers (BatchNorm statistics): what averaging touches.

    Integer buffers (``num_batches_tracked``) are equal on every rank in synchronous
    strategies, since every rank takes the same number of steps.
    """
    tensors = [p.data for p in model.parameters()]
    tensors += [b for b in model.buffers() if b.is_floating_point()]
    return tensors


@torch.no_grad()
def copy_model_state(source: nn.Module, target: nn.Module) -> None:
    for mine, theirs in zip(source.state_dict().values(), target.state_dict().values()):
        theirs.copy_(mine)
