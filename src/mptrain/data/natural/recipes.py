"""What the natural data sets recommend: the settings FedProx's paper (Li et al. 2020, its
appendix) trained them with -- batch 10, 20 local epochs, 10 clients a round, client SGD at
0.01 on Synthetic, 0.003 on FEMNIST, 0.8 on Shakespeare -- with one client per natural id
(``--partition natural``). The client count is the data's own, known once it is read (a
LEAF folder) or asked for (``synthetic:A,B`` makes ``--clients`` devices)."""

from __future__ import annotations

from ..defaults import TrainingDefaults

#: Client SGD's rate and the rounds FedProx ran, per kind of data.
_FEDPROX = {"synthetic": (0.01, 200), "femnist": (0.003, 200), "shakespeare": (0.8, 40)}
#: Before a LEAF folder or a Hub data set is read, its client count is unknown: a stand-in
#: that refuses nothing the real count would allow (the settings are resolved again with
#: the data's own recipe once it is read).
UNKNOWN_CLIENTS = 1_000_000
SYNTHETIC_DEVICES = 30


def natural_recipe(kind: str | None, clients: int) -> TrainingDefaults:
    """The recipe of natural data of ``kind`` (synthetic, femnist, shakespeare; None: not
    known yet) cut into its ``clients``."""
    lr, rounds = _FEDPROX.get(kind, (0.01, 100))
    federated = {"rounds": rounds, "clients": clients,
                 "clients_per_round": min(10, clients), "batch_size": 10, "lr": lr,
                 "momentum": 0.0, "optimizer": "sgd", "lr_decay": 1.0, "local_epochs": 20,
                 "partition": "natural"}
    return TrainingDefaults(epochs=10, batch_size=10, lr=lr, momentum=0.0, optimizer="sgd",
                            federated=federated)
