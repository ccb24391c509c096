"""fedbuff's settings: which of the federated section's it takes, and what its own stand for
when left out. Its settings live in fedavg's section (``FedAvgSettings``: the clients, their
training and the server optimizer are the same settings); no torch here."""

from __future__ import annotations

from ..fedavg.settings import ASYNCHRONOUS_SETTINGS

#: What fedbuff takes of the federated section: the clients and their local training, the
#: server optimizer, the stacked path, the training-set score, each client's score on its
#: own data and its personalization, the clock's speeds and availability, and its own.
FEDBUFF_SETTINGS = frozenset({
    "rounds", "clients", "local_epochs", "partition", "prox_mu", "server_optimizer",
    "server_lr", "server_momentum", "server_betas", "server_tau", "accept_failures",
    "vectorize_clients", "vectorize_chunk", "eval_train", "client_eval_every",
    "personalize", "personal_memory", "personal_head_epochs", "client_speeds",
    "availability_trace", "max_restarts"}) | ASYNCHRONOUS_SETTINGS
#: Why DP is not offered, said where the refusal of a DP setting says what to use instead:
#: FedBuff's DP variant clips each update and noises the buffer's sum, but the accountants
#: here assume each client joins a round independently with probability q.
WITHOUT_DP = ("{strategy} fedavg {sampling} poisson for DP-FedAvg (the accountant assumes "
              "Poisson sampling of each round's clients, and FedBuff draws a client whenever "
              "a slot frees: the epsilon reported would not hold)")
#: The largest default buffer: FedBuff's paper runs K = 100s to 1000 with B = 10.
MOST_DEFAULT_BUFFER = 10


def concurrency_of(f) -> int:
    """K: ``--concurrency``, or the clients a fedavg round would sample (at most all)."""
    return f.concurrency if f.concurrency is not None else min(f.sampled_clients, f.clients)


def buffer_size_of(f) -> int:
    """B: ``--buffer-size``, or half of K, at least 1 and at most 10."""
    if f.buffer_size is not None:
        return f.buffer_size
    return max(1, min(MOST_DEFAULT_BUFFER, concurrency_of(f) // 2))


def staleness_weight_of(f):
    """The parsed ``--staleness-weight`` (``federated.asynchronous.staleness``)."""
    from ...federated.asynchronous.staleness import parse_staleness_weight

    return parse_staleness_weight(f.staleness_weight)
