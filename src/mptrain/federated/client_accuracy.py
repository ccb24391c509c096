"""Per-client evaluation of the global model, many clients at once.

Every client is scored by the same model, so nothing needs stacking copies: the clients'
samples are read one after another in batches of the evaluation batch size that run across
client boundaries, and each sample's hit and loss are counted to its client. Clients of 50
samples then cost a few large batches instead of one small batch each. Both client paths
(one at a time, stacked cohorts) score this way: in evaluation mode a sample's output does
not depend on the batch it is in.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..engine.autocast import in_precision


@dataclass(frozen=True)
class ClientScores:
    """Each scored client's samples, hits and summed loss (float64, one entry a client)."""

    clients: list[int]
    samples: torch.Tensor
    correct: torch.Tensor
    loss_sum: torch.Tensor

    def accuracy(self) -> torch.Tensor:
        """Hits over samples; NaN for a client without samples."""
        return (self.correct / self.samples).where(self.samples > 0,
                                                    torch.tensor(float("nan")))

    def loss(self) -> torch.Tensor:
        return (self.loss_sum / self.samples).where(self.samples > 0,
                                                     torch.tensor(float("nan")))

    def as_lists(self) -> dict:
        """Plain lists, to travel in a round report (a tensor on a queue would travel as a
        shared-memory handle)."""
        return {"clients": list(self.clients), "samples": self.samples.tolist(),
                "correct": self.correct.tolist(), "loss_sum": self.loss_sum.tolist()}

    @classmethod
    def from_lists(cls, lists: dict) -> "ClientScores":
        as_tensor = lambda name: torch.tensor(lists[name], dtype=torch.float64)  # noqa: E731
        return cls(list(lists["clients"]), as_tensor("samples"), as_tensor("correct"),
                   as_tensor("loss_sum"))

    @classmethod
    def joined(cls, parts: list["ClientScores"]) -> "ClientScores":
        """Several ranks' scores as one, in client order."""
        clients = [c for p in parts for c in p.clients]
        order = torch.tensor(sorted(range(len(clients)), key=clients.__getitem__),
                             dtype=torch.int64)
        cat = (lambda name: torch.cat([getattr(p, name) for p in parts])[order]) if parts \
            else (lambda name: torch.zeros(0, dtype=torch.float64))
        return cls(sorted(clients), cat("samples"), cat("correct"), cat("loss_sum"))


@torch.no_grad()
def client_scores(model, feed, offsets: torch.Tensor, clients: list[int], batch_size: int,
                  device: torch.device, precision: str = "32", index: torch.Tensor | None = None,
                  beat=None) -> ClientScores:
    """``model``'s hits and cross-entropy on each of ``clients``: client ``i``'s samples are
    ``index[offsets[i]:offsets[i + 1]]`` of the data ``feed`` reads (``index`` None: the
    rows ``offsets[i]:offsets[i + 1]`` themselves, as natural clients store them)."""
    starts, stops = offsets[clients], offsets[[c + 1 for c in clients]]
    sizes = stops - starts
    if index is None:
        rows = [torch.arange(int(a), int(b)) for a, b in zip(starts, stops)]
    else:
        rows = [index[int(a):int(b)] for a, b in zip(starts, stops)]
    every = torch.cat(rows) if rows else torch.zeros(0, dtype=torch.int64)
    owner = torch.repeat_interleave(torch.arange(len(clients)), sizes).to(device)
    correct = torch.zeros(len(clients), dtype=torch.float64, device=device)
    loss_sum = torch.zeros(len(clients), dtype=torch.float64, device=device)
    was_training = model.training
    model.eval()
    forward = in_precision(model, precision, device)
    position = 0
    for batch in torch.split(every, batch_size):
        inputs, targets = feed.batch(batch)
        output = forward(inputs)
        mine = owner[position:position + len(batch)]
        correct.index_add_(0, mine, (output.argmax(dim=1) == targets).to(torch.float64))
        loss_sum.index_add_(0, mine, F.cross_entropy(output.float(), targets,
                                                     reduction="none").to(torch.float64))
        position += len(batch)
        if beat is not None:
            beat()   # a long evaluation is progress too, not a hang
    model.train(was_training)
    return ClientScores(list(clients), sizes.to(torch.float64), correct.cpu(), loss_sum.cpu())


def client_accuracies(model, feed, index: torch.Tensor, offsets: torch.Tensor,
                      clients: range, batch_size: int, device: torch.device,
                      precision: str = "32", beat=None) -> torch.Tensor:
    """Accuracy of ``model`` on each client of ``clients`` (float64, NaN for a client
    without samples): ``client_scores``'s hits over samples."""
    return client_scores(model, feed, offsets, list(clients), batch_size, device, precision,
                         index=index, beat=beat).accuracy()
