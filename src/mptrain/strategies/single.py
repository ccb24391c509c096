"""One process, the baseline every other strategy is measured against."""

import torch
import torch.nn as nn

from .data_parallel import DataParallelStrategy


class SingleStrategy(DataParallelStrategy):
    name = "single"
    in_process = True

    def replica(self, model: nn.Module, group, device: torch.device) -> nn.Module:
        # The caller's model itself: nothing to share, nothing to copy back.
        return model.to(device)

    def publish(self, replica, shared_model, group):
        pass
