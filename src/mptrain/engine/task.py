"""What is being learnt decides the loss and the score reported to the user."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..data.sources import CLASSIFICATION
from .autocast import in_precision
from .precision import FULL


def loss_fn(task: str, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean loss of one batch.

    Classification uses cross-entropy on the raw outputs: it equals NLL for models that
    already end in log_softmax (log_softmax is idempotent), so both kinds of model train.
    """
    if task == CLASSIFICATION:
        return F.cross_entropy(output, target)
    return F.mse_loss(output, target.view_as(output).to(output.dtype))


@torch.no_grad()
def evaluate(model, feed, indices: torch.Tensor, task: str, batch_size: int,
             device: torch.device, beat=None, layout=None,
             precision: str = FULL) -> tuple[float, int, int]:
    """Sum of losses, number correct (classification) and count over ``indices`` of the data
    ``feed`` (a ``data.device_feed.DeviceFeed``) puts on ``device``.

    ``layout`` (a ChannelsLastEvaluation) may run the forward passes on a faster twin;
    ``precision``: the run's, so that the model is scored as it trains.
    """
    was_training = model.training
    model.eval()
    forward = in_precision(layout.forward_for(model) if layout is not None else model,
                           precision, device)
    loss_sum, correct, count = 0.0, 0, 0
    chunks = ((None, chunk) for chunk in torch.split(indices, batch_size))
    for _, chunk, inputs, targets in feed.batches(chunks):
        output = forward(inputs)
        loss_sum += loss_fn(task, output, targets).item() * len(chunk)
        if task == CLASSIFICATION:
            correct += int((output.argmax(dim=1) == targets).sum())
        count += len(chunk)
        if beat is not None:
            beat()  # a long evaluation is progress too, not a hang
    model.train(was_training)
    return loss_sum, correct, count
