"""Which rows of a data set each natural client owns.

A natural data set stores its rows grouped by client: client ``c`` owns the training rows
``train_offsets[c] : train_offsets[c + 1]`` and the test rows ``test_offsets[c] :
test_offsets[c + 1]``. So the whole per-client index is two int64 arrays of ``clients + 1``
entries -- 100,000 clients cost 1.6 MB, not 100,000 Python objects -- and a client's data is
one slice of the shared tensors (read in order, no gather index). Per-sample client ids,
where something wants them, are one ``repeat_interleave`` away (:meth:`train_ids`).

Test rows past ``test_offsets[-1]`` belong to no training client: LEAF's user split (``-t
user``) gives the test set its own users, who are scored in the pooled test accuracy but
have no client to evaluate per client.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch


@dataclass(frozen=True)
class NaturalClients:
    """The client index of a natural data set (see the module's docstring)."""

    train_offsets: torch.Tensor            # [clients + 1] int64, starts at 0
    test_offsets: torch.Tensor | None      # [clients + 1] int64, or None without a test set
    #: The data's own client names (LEAF's user ids, a column's values); None: 0..clients-1.
    names: tuple[str, ...] | None = None
    #: LEAF's optional ``hierarchies`` (one entry per client, e.g. the play of a role).
    hierarchies: tuple | None = None
    #: What ``test_offsets`` index: None, the bundle's test set; devices generated on
    #: demand (``on_demand``) index their own test split of every device, while the
    #: bundle's test set holds a fixed sample of the devices' test rows.
    test_data: object = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        for name in ("train_offsets", "test_offsets"):
            offsets = getattr(self, name)
            if offsets is None:
                continue
            if offsets.dtype != torch.int64 or offsets.dim() != 1 or int(offsets[0]) != 0 \
                    or bool((offsets[1:] < offsets[:-1]).any()):
                raise ValueError(f"{name} must be non-decreasing int64 offsets from 0")
        if self.test_offsets is not None and len(self.test_offsets) != len(self.train_offsets):
            raise ValueError("train and test offsets must describe the same clients")
        if self.names is not None and len(self.names) != self.count:
            raise ValueError("one name per client")

    @property
    def count(self) -> int:
        return len(self.train_offsets) - 1

    def train_sizes(self) -> torch.Tensor:
        return self.train_offsets[1:] - self.train_offsets[:-1]

    def test_sizes(self) -> torch.Tensor | None:
        if self.test_offsets is None:
            return None
        return self.test_offsets[1:] - self.test_offsets[:-1]

    def train_ids(self) -> torch.Tensor:
        """Each training row's client (int64 [rows])."""
        return torch.repeat_interleave(torch.arange(self.count), self.train_sizes())

    def name(self, client: int) -> str:
        return self.names[client] if self.names is not None else str(client)

    @classmethod
    def from_sizes(cls, train_sizes, test_sizes=None, names=None,
                   hierarchies=None) -> "NaturalClients":
        return cls(train_offsets=offsets_of(train_sizes),
                   test_offsets=None if test_sizes is None else offsets_of(test_sizes),
                   names=None if names is None else tuple(names),
                   hierarchies=None if hierarchies is None else tuple(hierarchies))


def offsets_of(sizes) -> torch.Tensor:
    """``[0, s0, s0 + s1, ...]`` as int64."""
    sizes = np.asarray(sizes, dtype=np.int64)
    return torch.from_numpy(np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64))


def group_rows(ids: np.ndarray, clients: int) -> tuple[np.ndarray, np.ndarray]:
    """The row order that groups rows by client id (stable: a client keeps its rows' order)
    and the clients' sizes; rows with id < 0 (no client) sort last."""
    keys = np.where(ids < 0, clients, ids)
    order = np.argsort(keys, kind="stable")
    return order, np.bincount(ids[ids >= 0], minlength=clients)


@dataclass
class NaturalData:
    """What a natural reader (leaf, hf, synthetic) returns: its data sets, classes, model and
    recipe, and the clients; ``data.sources`` makes it a ``DataBundle`` (a classification
    task), so the readers need nothing from there."""

    name: str
    train: object        # SharedTensorDataset
    test: object | None
    output_size: int
    default_model: str
    defaults: object     # TrainingDefaults
    clients: NaturalClients
