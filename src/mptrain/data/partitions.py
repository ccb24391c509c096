"""Which samples each simulated federated client owns (``--partition``).

A client is a fixed set of indices into the one shared training set, chosen once before
training. The schemes are the ones federated-learning papers (and Flower's
``flwr_datasets`` partitioners) use: ``iid``, label skew by a Dirichlet draw, and
McMahan's pathological shards. Users with another idea name a function instead.

Everything here is pure: a partition depends only on (spec, targets, clients, seed), and its
random numbers come from a numpy ``Generator`` seeded from ``seed`` (never global RNG
state). numpy's PCG64 stream is unrelated to the torch generator that shuffles epochs
(``sharding.epoch_permutation(seed)``), so client membership and batch order are not
accidentally the same permutation.

Each client's indices come back sorted: gathering rows in index order reads memory in order.
"""

from __future__ import annotations

import numpy as np
import torch

from ..errors import UserError
from ..errors import setting_name as named   # as the caller spelled the setting
from .partition_laws import (SIZE_LAWS, inner_dirichlet_owner, pathological_owner,
                             size_law_owner, size_law_sizes)
# What --partition says and the user's functions: their own modules, named here too, as
# the way in that callers know (``parse_partition``, ``given_function``).
from .partition_spec import PartitionSpec, parse_partition  # noqa: F401
from .user_partitions import given_function, user_partition  # noqa: F401


# Resampling the Dirichlet proportions is cheap (counts only), so many tries cost little;
# past this, the minimum is unreachable in practice and the user must change a setting.
DIRICHLET_TRIES = 100
DIRICHLET_MIN_CAP = 10


def partition_clients(spec: str | PartitionSpec, targets: torch.Tensor, clients: int,
                      seed: int) -> list[torch.Tensor]:
    """One sorted int64 index tensor per client; clients are disjoint, never empty, and
    (except for ``shards:K``'s remainder and user functions) cover every sample.

    ``spec`` is the ``--partition`` text or what :func:`parse_partition` made of it.
    """
    parsed = parse_partition(spec) if not isinstance(spec, PartitionSpec) else spec
    samples = len(targets)
    if isinstance(clients, bool) or not isinstance(clients, int) or clients < 1:
        raise UserError(f"{named('clients')} must be a whole number >= 1 (got {clients!r})")
    if clients > samples:
        raise UserError(f"{named('clients')} {clients} is more than the {samples} training "
                        f"samples; lower {named('clients')} so that every client gets at least "
                        "one sample")
    rng = np.random.default_rng(seed % 2**64)  # numpy refuses negative seeds
    if parsed.kind == "iid":
        return iid_partition(samples, clients, rng)
    if parsed.kind == "dirichlet":
        return dirichlet_partition(_class_labels(targets, parsed), clients, parsed.alpha,
                                   parsed.min_size, rng, str(parsed))
    if parsed.kind == "shards":
        return shard_partition(_class_labels(targets, parsed), clients, parsed.shards, rng,
                               str(parsed))
    if parsed.kind == "pathological":
        return _parts_from_owner(pathological_owner(_class_labels(targets, parsed), clients,
                                                    parsed.shards, rng, str(parsed)), clients)
    if parsed.kind == "inner-dirichlet":
        return _parts_from_owner(inner_dirichlet_owner(_class_labels(targets, parsed),
                                                       clients, parsed.alpha, rng), clients)
    if parsed.kind in SIZE_LAWS:
        sizes = size_law_sizes(parsed.kind, samples, clients, parsed.min_size, str(parsed))
        return _parts_from_owner(size_law_owner(sizes, rng), clients)
    if parsed.kind == "natural":
        raise UserError(f"{named('partition')} natural takes the clients the data names; "
                        "cut it with cut_training_set(spec, bundle, ...)")
    return user_partition(parsed.function, targets, clients, seed)


def cut_training_set(spec: str | PartitionSpec, data, clients: int, seed: int
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """The training set of ``data`` (a ``DataBundle``) cut into ``clients``: every client's
    indices one after another, and where each client starts (``[clients + 1]``, int64).

    ``natural`` takes the clients the data carries (``data.clients``), whose rows are stored
    client after client: the index is then the identity and the offsets the data's own, so
    100,000 natural clients cost two arrays, never a list of 100,000 tensors. Every other
    partition cuts the pooled training set (:func:`partition_clients`)."""
    parsed = parse_partition(spec) if not isinstance(spec, PartitionSpec) else spec
    if parsed.kind == "natural":
        natural = getattr(data, "clients", None)
        if natural is None:
            raise UserError(f"{named('partition')} natural needs data that names each "
                            f"sample's client (leaf:DIR, hf:NAME, synthetic:ALPHA,BETA); "
                            f"{data.name} does not: cut it with iid, dirichlet:ALPHA, "
                            "shards:K, ...")
        if clients != natural.count:
            raise UserError(f"{named('clients')} {clients}, but {data.name} has "
                            f"{natural.count:,} natural clients and {named('partition')} "
                            f"natural trains each; leave {named('clients')} out, or cut the "
                            f"pooled data with another {named('partition')} (e.g. iid)")
        from .natural.on_demand import RowRange   # on demand: no int64 per row of 45M rows

        index = RowRange(len(data.train)) if getattr(data.train, "on_demand", False) else \
            torch.arange(len(data.train), dtype=torch.int64)
        return index, natural.train_offsets.clone()
    if getattr(data.train, "on_demand", False):
        raise UserError(f"{data.name} with {data.clients.count:,} devices is generated on "
                        f"demand, a device at a time: only {named('partition')} natural "
                        "can cut it (the others read every label)")
    parts = partition_clients(parsed, data.train.targets, clients, seed)
    sizes = torch.tensor([0] + [len(p) for p in parts], dtype=torch.int64)
    return torch.cat([p.to(torch.int64) for p in parts]), sizes.cumsum(0)


def iid_partition(samples: int, clients: int, rng: np.random.Generator) -> list[torch.Tensor]:
    """A seeded permutation cut into ``clients`` parts whose sizes differ by at most one."""
    sizes = np.full(clients, samples // clients)
    sizes[:samples % clients] += 1
    owner = np.empty(samples, dtype=np.int64)
    owner[rng.permutation(samples)] = np.repeat(np.arange(clients), sizes)
    return _parts_from_owner(owner, clients)


def default_min_size(samples: int, clients: int) -> int:
    """A tenth of the fair share ``samples // clients``, at most 10 and at least 1.

    10 is the minimum of the usual implementations (NIID-Bench, Flower). A fixed 10 is
    unreachable when the fair share is small (1,438 digits over 100 clients: 14 each, and
    Dirichlet(0.5) proportions leave some client under 10 in essentially every draw), while
    a tenth of the share is met within a few draws for ALPHA >= 0.5.
    """
    return max(1, min(DIRICHLET_MIN_CAP, samples // (10 * clients)))


def dirichlet_partition(labels: np.ndarray, clients: int, alpha: float, min_size: int | None,
                        rng: np.random.Generator, name: str = "dirichlet"
                        ) -> list[torch.Tensor]:
    """Label skew: each class's shuffled indices cut among the clients by proportions drawn
    from Dirichlet(alpha); redrawn (up to ``DIRICHLET_TRIES`` times) until every client has
    at least ``min_size`` samples. Covers every sample."""
    samples = len(labels)
    minimum = default_min_size(samples, clients) if min_size is None else min_size
    if minimum * clients > samples:
        raise UserError(f"{named('partition')} {name}: {clients} clients of at least "
                        f"{minimum} samples need {minimum * clients}, but there are {samples}; "
                        f"lower MIN or {named('clients')}")
    by_class = [rng.permutation(np.flatnonzero(labels == c)) for c in np.unique(labels)]
    for _ in range(DIRICHLET_TRIES):
        # Counts first, indices only for the draw that is kept: a try costs O(classes x clients).
        counts = [_dirichlet_counts(len(members), clients, alpha, rng) for members in by_class]
        if any(c is None for c in counts) or np.sum(counts, axis=0).min() < minimum:
            continue
        owner = np.empty(samples, dtype=np.int64)
        for members, class_counts in zip(by_class, counts):
            owner[members] = np.repeat(np.arange(clients), class_counts)
        return _parts_from_owner(owner, clients)
    plural, lower_min = ("s", " or MIN") if minimum > 1 else ("", "")
    raise UserError(f"{named('partition')} {name}: no draw in {DIRICHLET_TRIES} gave each of "
                    f"{clients} clients at least {minimum} sample{plural}; raise ALPHA or "
                    f"lower {named('clients')}{lower_min}")


def _dirichlet_counts(size: int, clients: int, alpha: float, rng: np.random.Generator):
    proportions = rng.dirichlet(np.full(clients, alpha))
    if not np.all(np.isfinite(proportions)) or proportions.sum() <= 0:
        return None  # tiny ALPHA can underflow to all zeros; treat it as a failed draw
    # The last cut is pinned to `size`: a cumulative sum of 0.9999999 must not drop a sample.
    cuts = np.minimum(np.floor(np.cumsum(proportions[:-1]) * size), size).astype(np.int64)
    return np.diff(np.concatenate([[0], cuts, [size]]))


def shard_partition(labels: np.ndarray, clients: int, per_client: int,
                    rng: np.random.Generator, name: str = "shards") -> list[torch.Tensor]:
    """McMahan et al. 2017's pathological non-IID split: indices sorted by label (stable),
    cut into ``clients * per_client`` equal shards, ``per_client`` shards per client by a
    seeded permutation.

    The last ``samples % (clients * per_client)`` indices in label order (so samples of the
    highest labels) belong to no client. A shard straddles two labels when class sizes are
    not multiples of the shard size, so a client can see up to ``2 * per_client`` labels on
    unbalanced data; on balanced data with aligned shards it sees at most ``per_client``.
    """
    samples, count = len(labels), clients * per_client
    if count > samples:
        raise UserError(f"{named('partition')} {name} with {named('clients')} {clients} needs "
                        f"{count} shards but there are only {samples} samples; lower K or "
                        f"{named('clients')}")
    shard_size = samples // count
    order = np.argsort(labels, kind="stable")[:count * shard_size]
    shard_owner = np.empty(count, dtype=np.int64)
    shard_owner[rng.permutation(count)] = np.arange(count) // per_client
    owner = np.full(samples, -1, dtype=np.int64)  # -1: the remainder, owned by no client
    owner[order] = np.repeat(shard_owner, shard_size)
    return _parts_from_owner(owner, clients)


def _parts_from_owner(owner: np.ndarray, clients: int) -> list[torch.Tensor]:
    """Client ``c`` gets the samples whose owner is ``c``, in index order (-1: nobody)."""
    order = np.argsort(owner, kind="stable")
    sizes = np.bincount(owner[owner >= 0], minlength=clients)
    start = len(owner) - int(sizes.sum())  # the unowned (-1) sort first
    bounds = start + np.concatenate([[0], np.cumsum(sizes)])
    return [torch.from_numpy(order[bounds[c]:bounds[c + 1]].astype(np.int64))
            for c in range(clients)]


def _class_labels(targets: torch.Tensor, parsed: PartitionSpec) -> np.ndarray:
    if targets.dtype.is_floating_point or targets.dim() != 1:
        raise UserError(f"{named('partition')} {parsed} needs class labels, but this data set's "
                        f"targets are {targets.dtype} of shape {tuple(targets.shape)} "
                        "(regression); use iid or a partition function")
    return targets.cpu().numpy()
