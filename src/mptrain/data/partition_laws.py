"""More of flwr-datasets' partitioners, by the same names: ``pathological:K`` (K classes a
client), ``inner-dirichlet:ALPHA`` (equal sizes, each client's label mix its own
Dirichlet(ALPHA) draw) and the size laws ``linear``, ``square``, ``exponential`` (client i
of n holds a share of the samples proportional to i, i^2 or e^i, i = 1..n).

Each returns ``owner``: one client per sample (-1: nobody), which ``partitions`` turns into
index lists. Pure functions of their arguments and a numpy ``Generator``.
"""

from __future__ import annotations

import numpy as np

from ..errors import UserError
from ..errors import setting_name as named   # as the caller spelled the setting

SIZE_LAWS = ("linear", "square", "exponential")


def pathological_owner(labels: np.ndarray, clients: int, per_client: int,
                       rng: np.random.Generator, name: str) -> np.ndarray:
    """flwr-datasets' ``PathologicalPartitioner`` (its ``random`` class assignment, after
    Li et al. 2021's NIID-Bench): each client draws ``per_client`` distinct classes; each
    class's samples, in index order, are cut into as many near-equal parts
    (``array_split``) as clients drew it, dealt to those clients in client order. Classes
    no client drew are left out (owned by nobody)."""
    classes = np.unique(labels)
    if per_client > len(classes):
        raise UserError(f"{named('partition')} {name}: {per_client} classes a client, but the "
                        f"data has {len(classes)}; lower K")
    # K distinct classes per client, uniformly: the first K of a random order of the
    # classes, drawn for every client at once ([clients, K] class positions).
    drawn = np.argsort(rng.random((clients, len(classes))), axis=1)[:, :per_client]
    owner = np.full(len(labels), -1, dtype=np.int64)
    for position, label in enumerate(classes):
        takers = np.flatnonzero((drawn == position).any(axis=1))
        if not len(takers):
            continue
        members = np.flatnonzero(labels == label)
        if len(takers) > len(members):
            raise UserError(f"{named('partition')} {name}: class {label} is drawn by "
                            f"{len(takers)} clients but has {len(members)} samples; lower "
                            f"K or {named('clients')}")
        for taker, part in zip(takers, np.array_split(members, len(takers))):
            owner[part] = taker
    return owner


def inner_dirichlet_owner(labels: np.ndarray, clients: int, alpha: float,
                          rng: np.random.Generator) -> np.ndarray:
    """flwr-datasets' ``InnerDirichletPartitioner`` with equal sizes (``samples //
    clients``, the first ``samples % clients`` one more): client c's labels follow its own
    prior ``p_c ~ Dirichlet(alpha)``; a class used up leaves every prior, the rest
    renormalised. flwr draws sample by sample; here each round draws every client's
    missing samples at once (a multinomial per client), grants a class's demand in full or,
    where it exceeds what is left, a uniformly random part of it -- the same law, in a few
    rounds of O(clients x classes). Covers every sample."""
    classes, label_index = np.unique(labels, return_inverse=True)
    samples = len(labels)
    need = np.full(clients, samples // clients, dtype=np.int64)
    need[:samples % clients] += 1
    left = np.bincount(label_index, minlength=len(classes)).astype(np.int64)
    priors = rng.dirichlet(np.full(len(classes), alpha), size=clients)
    granted = np.zeros((clients, len(classes)), dtype=np.int64)
    while need.sum():
        priors[:, left == 0] = 0
        rows = priors.sum(axis=1, keepdims=True)
        # A prior that only had used-up classes starts again from what is left.
        priors = np.where(rows > 0, priors, left / left.sum())
        priors /= priors.sum(axis=1, keepdims=True)
        demand = rng.multinomial(need, priors)                  # [clients, classes]
        for j in np.flatnonzero(demand.sum(axis=0) > left):
            demand[:, j] = rng.multivariate_hypergeometric(demand[:, j], int(left[j]))
        granted += demand
        need -= demand.sum(axis=1)
        left -= demand.sum(axis=0)
    owner = np.empty(samples, dtype=np.int64)
    for j in range(len(classes)):
        members = rng.permutation(np.flatnonzero(label_index == j))
        owner[members] = np.repeat(np.arange(clients), granted[:, j])
    return owner


def size_law_sizes(law: str, samples: int, clients: int, minimum: int | None,
                   name: str) -> np.ndarray:
    """Client sizes by flwr-datasets' ``LinearPartitioner``, ``SquarePartitioner``,
    ``ExponentialPartitioner``: shares of ``f(i)``, i = 1..clients, floored, the remainder to
    the last client. With ``minimum``, each client first gets that many and the law shares
    out the rest (flwr has no minimum, and refuses an empty client; so does this without
    one, naming the minimum that would help)."""
    ids = np.arange(1, clients + 1, dtype=np.float64)
    weights = {"linear": ids, "square": ids ** 2,
               # e^i / sum e^i is e^(i - n) / sum e^(i - n): no overflow past i = 709
               "exponential": np.exp(ids - clients)}[law]
    base = minimum or 0
    if base * clients > samples:
        raise UserError(f"{named('partition')} {name}: {clients} clients of at least {base} "
                        f"samples need {base * clients}, but there are {samples}; lower MIN "
                        f"or {named('clients')}")
    rest = samples - base * clients
    sizes = (weights / weights.sum() * rest).astype(np.int64)
    sizes[-1] += rest - sizes.sum()
    sizes += base
    if sizes.min() < 1:
        empty = int(np.sum(sizes < 1))
        raise UserError(f"{named('partition')} {name} leaves {empty} of {clients} clients "
                        f"empty ({samples} samples); give a minimum size, {law}:MIN (e.g. "
                        f"{law}:1), or lower {named('clients')}")
    return sizes


def size_law_owner(sizes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A seeded permutation cut into ``sizes`` (flwr cuts the data in its stored order,
    which on data sorted by label would add a label skew no one asked for)."""
    owner = np.empty(int(sizes.sum()), dtype=np.int64)
    owner[rng.permutation(len(owner))] = np.repeat(np.arange(len(sizes)), sizes)
    return owner
