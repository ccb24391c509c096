"""One process, the baseline every other strategy is measured against."""

import torch
import torch.nn as nn

from .base import Strategy


class SingleStrategy(Strategy):
    name = "single"
    uses_worker_processes = False

    def replica(self, model: nn.Module, group, device: torch.device) -> nn.Module:
        # The caller's model itself: nothing to share, nothing to copy back.
        return model.to(device)

    def publish(self, replica, shared_model, group):
        pass
