"""Per-client evaluation of the global model, many clients at once.

Every client is scored by the same model, so nothing needs stacking copies: the clients'
samples are read one after another in batches of the evaluation batch size that run across
client boundaries, and each sample's hit is counted to its client. Clients of 50 samples
then cost a few large batches instead of one small batch each.
"""

from __future__ import annotations

import torch

from ..engine.autocast import in_precision


@torch.no_grad()
def client_accuracies(model, feed, index: torch.Tensor, offsets: torch.Tensor,
                      clients: range, batch_size: int, device: torch.device,
                      precision: str = "32", beat=None) -> torch.Tensor:
    """Accuracy of ``model`` on each client of ``clients`` (float64, NaN for a client
    without samples): client ``i``'s samples are ``index[offsets[i]:offsets[i + 1]]``."""
    first, last = offsets[clients.start].item(), offsets[clients.stop].item()
    sizes = (offsets[clients.start + 1:clients.stop + 1] - offsets[clients.start:clients.stop])
    owner = torch.repeat_interleave(torch.arange(len(clients)), sizes).to(device)
    correct = torch.zeros(len(clients), dtype=torch.float64, device=device)
    was_training = model.training
    model.eval()
    forward = in_precision(model, precision, device)
    position = 0
    for batch in torch.split(index[first:last], batch_size):
        inputs, targets = feed.batch(batch)
        hits = (forward(inputs).argmax(dim=1) == targets).to(torch.float64)
        correct.index_add_(0, owner[position:position + len(batch)], hits)
        position += len(batch)
        if beat is not None:
            beat()   # a long evaluation is progress too, not a hang
    model.train(was_training)
    return (correct.cpu() / sizes.to(torch.float64)).where(sizes > 0,
                                                           torch.tensor(float("nan")))
