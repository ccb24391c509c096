"""One process, the baseline every other strategy is measured against."""

import torch
import torch.nn as nn

from ..errors import UserError
from ..errors import setting_name as named   # as the caller spelled the setting
from .epochs import EpochStrategy


class SingleStrategy(EpochStrategy):
    name = "single"
    in_process = True
    takes_worker_count = False
    default_workers = 1
    settings = frozenset({"epochs", "steps_per_epoch", "lr_schedule"})
    instead = {"rounds": "{epochs}", "max_restarts": "{strategy} sync or ddp"}

    @classmethod
    def check_config(cls, config):
        if config.workers != 1:
            raise UserError(f"strategy 'single' runs one process but {named('workers')} is "
                            f"{config.workers}; use {named('strategy')} hogwild|sync|ddp for "
                            "more workers")

    def replica(self, model: nn.Module, group, device: torch.device) -> nn.Module:
        # The caller's model itself: nothing to share, nothing to copy back.
        return model.to(device)

    def publish(self, replica, shared_model, group):
        pass
