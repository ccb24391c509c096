"""``nn.DataParallel``: one process, the model replicated on several GPUs at every step.

Each step's batch is scattered over the GPUs, every GPU runs forward on its part with a
replica broadcast from the first (the current GPU, which holds the model), outputs are
gathered there, and backward sums the gradients there (replicate / scatter / parallel_apply
/ gather). BatchNorm's running statistics come from the first GPU's part of the batch only,
as with any DataParallel model. It is the simplest way to use the
GPUs of one machine -- and PyTorch recommends DistributedDataParallel over it, since one
Python process drives every GPU and GPU 0 does the gathering; mptrain offers both so that
the two can be measured one switch apart (``--strategy ddp --device cuda``).

``--workers`` counts GPUs (the first N visible; default all) and ``--batch-size`` is per
GPU, as it is per worker elsewhere: a step trains ``batch_size x workers`` samples, as a
ddp step of the same flags does. There is no CPU form: ``nn.DataParallel`` without GPUs only
calls the module.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from ..data.sharding import batches, epoch_permutation
from ..engine.autocast import autocast_module, without_autocast_module
from ..errors import UserError
from ..errors import setting_name as named   # as the caller spelled the setting
from .base import visible_gpus
from .epochs import EpochBatches, EpochStrategy, batch_shapes


class DataParallelGPUsStrategy(EpochStrategy):
    name = "dp"
    in_process = True
    settings = frozenset({"epochs", "steps_per_epoch", "lr_schedule"})
    instead = {"rounds": "{epochs}", "max_restarts": "{strategy} sync or ddp"}

    @classmethod
    def recommended(cls, defaults):
        values = super().recommended(defaults)
        values["device"] = "cuda"
        return values

    @classmethod
    def default_worker_count(cls) -> int:
        return max(1, visible_gpus())

    @classmethod
    def check_config(cls, config):
        if config.compile:
            raise UserError(f"{named('compile')} does not work with strategy 'dp': "
                            "nn.DataParallel copies the module onto every GPU each step, and a "
                            "copy of a compiled module is not compiled; use "
                            f"{named('strategy')} ddp {named('compile')}")
        if config.device != "cuda":
            raise UserError("strategy 'dp' (nn.DataParallel) splits each batch over GPUs and "
                            f"needs {named('device')} cuda; on CPU use {named('strategy')} ddp "
                            "or sync")
        gpus = visible_gpus()
        if gpus == 0:
            raise UserError("strategy 'dp' (nn.DataParallel) needs GPUs and no CUDA device is "
                            f"visible; on CPU use {named('strategy')} ddp or sync")
        if config.workers > gpus:
            raise UserError(f"strategy 'dp' over {named('workers')} {config.workers} GPUs, but "
                            f"{gpus} are visible; use {named('workers')} {gpus} or fewer")

    def _step_size(self) -> int:
        return self.config.batch_size * self.config.workers

    def epoch_batches(self, num_samples, group, epoch):
        config = self.config
        order = epoch_permutation(num_samples, config.seed, epoch)
        if config.steps_per_epoch is not None:
            order = order[:config.steps_per_epoch * self._step_size()]
        return EpochBatches(steps=-(-len(order) // self._step_size()),
                            batches=enumerate(batches(order, self._step_size())))

    def samples_per_round(self, data, workers):
        total = len(data.train)
        if self.config.steps_per_epoch is not None:
            total = min(total, self.config.steps_per_epoch * self._step_size())
        return total

    def batch_sizes(self, data, workers):
        return batch_shapes(self.samples_per_round(data, workers), self._step_size())

    def replica(self, model, group, device):
        # The caller's model itself on the current GPU (where the batches and the loss are
        # too), the first of the replicas DataParallel broadcasts it to every step.
        first = device.index if device.index is not None else torch.cuda.current_device()
        others = [index for index in range(visible_gpus()) if index != first]
        model.to(torch.device("cuda", first))
        return nn.DataParallel(
            autocast_module(model, self.config.precision, "cuda"),
            device_ids=[first, *others[:self.config.workers - 1]], output_device=first)

    def unwrap(self, replica):
        return without_autocast_module(replica.module)

    def may_change_layout(self, replica):
        return False   # channels-last is a CPU speed-up; dp trains on GPUs only

    def publish(self, replica, shared_model, group):
        pass   # the caller's model is the one trained

    def summary_fields(self):
        return {"gpus": self.config.workers}

    def describe(self, plan, model):
        workers = self.config.workers
        return [f"nn.DataParallel over {workers} GPU(s) from the current one: each step's "
                f"batch of {self._step_size()} scattered {workers} way(s), gradients summed "
                "on the first; BatchNorm's running statistics from the first GPU's part only"]
