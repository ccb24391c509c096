"""Token sequences of different lengths and a model that reads them padded, for the tests of
``--collate`` (stacked, ``test_ragged``) and of the stream loader (``test_stream``); module
level, so that forked and spawned workers find them."""

from __future__ import annotations

import torch
import torch.nn as nn
from torch.utils.data import Dataset


class Sequences(Dataset):
    """Token sequences of lengths 1 to 6; the class is whether token 1 occurs."""

    def __init__(self, count=48):
        generator = torch.Generator().manual_seed(0)
        self.items = []
        for index in range(count):
            tokens = torch.randint(1, 8, (1 + index % 6,), generator=generator)
            self.items.append((tokens, int((tokens == 1).any())))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        return self.items[index]


class BagOfTokens(nn.Module):
    """Takes ``(tokens, mask)``: the padded positions must not count."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed, self.out = nn.Embedding(8, 8), nn.Linear(8, 2)

    def forward(self, batch):
        tokens, mask = batch
        summed = (self.embed(tokens) * mask.unsqueeze(-1)).sum(1)
        return self.out(summed / mask.sum(1, keepdim=True).clamp(min=1))
