"""Checks made in the parent before any worker starts: a mistake found here is one clear
line, not a traceback from every worker."""

from __future__ import annotations

import torch
import torch.nn as nn

from ..config import TrainConfig
from ..data.sources import CLASSIFICATION, DataBundle
from ..errors import UserError


def check_device(config: TrainConfig) -> None:
    if config.device == "cuda" and torch.cuda.device_count() == 0:
        raise UserError("--device cuda was asked for but no CUDA device is visible; "
                        "use --device cpu")



def check_model_fits_data(model: nn.Module, bundle: DataBundle) -> None:
    """Run two samples through the model in the parent: a shape mismatch is a user error
    to report now, not a traceback from every worker later."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            output = model(bundle.train.head(2))
    except Exception as err:
        raise UserError(f"the model cannot take the data's inputs of shape "
                        f"{tuple(bundle.input_shape)}: {type(err).__name__}: {err}") from None
    finally:
        model.train(was_training)
    if not isinstance(output, torch.Tensor):
        raise UserError(f"the model returned {type(output).__name__}; it must return a tensor")
    if bundle.task == CLASSIFICATION and (output.dim() != 2
                                          or output.shape[1] < bundle.output_size):
        raise UserError(f"the model's output has shape {tuple(output.shape)} but the data has "
                        f"{bundle.output_size} classes; it must return [batch, classes]")


def check_workload(config: TrainConfig, bundle: DataBundle, workers: int,
                   cores: int) -> list[str]:
    """Refuse impossible splits; return warnings for legal but surprising ones."""
    samples = len(bundle.train)
    if workers > samples:
        raise UserError(f"{workers} workers for {samples} training samples: every worker "
                        f"needs at least one; use --workers {samples} or fewer")
    warnings = []
    shard = -(-samples // workers)
    if config.batch_size > shard:
        warnings.append(f"--batch-size {config.batch_size} is larger than each worker's shard "
                        f"({shard} samples): every worker takes one step of {shard} samples "
                        "per epoch")
    if workers > 2 * cores:
        warnings.append(f"{workers} workers on {cores} usable cores: they time-share the "
                        f"cores with 1 thread each; expect no speed-up beyond {cores} workers")
    return warnings
