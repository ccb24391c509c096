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

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..errors import UserError, closest, raised_by_users_code
from ..imports import colon_hint
from .partition_laws import (SIZE_LAWS, inner_dirichlet_owner, pathological_owner,
                             size_law_owner, size_law_sizes)
from ..errors import setting_name as named   # as the caller spelled the setting

#: The --partition vocabulary, as a refusal of an unknown one names it.
PARTITION_CHOICES = ("iid, dirichlet:ALPHA[:MIN], shards:K, natural, pathological:K, "
                     "inner-dirichlet:ALPHA, linear[:MIN], square[:MIN], exponential[:MIN], "
                     "or an import string 'package.module:function' / "
                     "'path/to/file.py:function'")

# Resampling the Dirichlet proportions is cheap (counts only), so many tries cost little;
# past this, the minimum is unreachable in practice and the user must change a setting.
DIRICHLET_TRIES = 100
DIRICHLET_MIN_CAP = 10


@dataclass(frozen=True)
class PartitionSpec:
    """A parsed ``--partition``: ``kind`` is natural, iid, dirichlet, shards, pathological,
    inner-dirichlet, a size law (linear, square, exponential) or function."""

    kind: str
    alpha: float | None = None
    min_size: int | None = None  # dirichlet: None = default_min_size(samples, clients)
    shards: int | None = None
    function: str | None = None

    def __str__(self) -> str:
        if self.kind == "dirichlet":
            tail = f":{self.min_size}" if self.min_size is not None else ""
            return f"dirichlet:{self.alpha:g}{tail}"
        if self.kind in ("shards", "pathological"):
            return f"{self.kind}:{self.shards}"
        if self.kind == "inner-dirichlet":
            return f"inner-dirichlet:{self.alpha:g}"
        if self.kind in SIZE_LAWS:
            return self.kind + (f":{self.min_size}" if self.min_size is not None else "")
        return self.function if self.kind == "function" else self.kind


#: Partition functions given from Python (``fit(partition=my_split)``), by the name that
#: stands for them in the run's settings: the cut is made in the parent (and in every
#: torchrun rank, each of which called ``fit`` with the function), so the function itself
#: never travels to a worker, and a lambda or a notebook's function serves as well.
_GIVEN_FUNCTIONS: dict = {}


def given_function(function) -> str:
    """The name ``function`` goes by in the run's settings, summary and checkpoint
    (``module:qualified_name``, the import string it would have on the command line);
    :func:`user_partition` calls the function itself. A resume gives it again, as it gives
    an import string again.

    A function without a name of its own (a lambda, one defined in a function) is also
    named by where it is, ``@file:line``: two lambdas of a script both went by
    ``__main__:<lambda>``, so a resume given the other one took it for the same cut."""
    qualname = getattr(function, '__qualname__', type(function).__name__)
    name = f"{getattr(function, '__module__', None) or 'python'}:{qualname}"
    code = getattr(function, "__code__", None)
    if "<" in qualname and code is not None:
        name += f"@{Path(code.co_filename).name}:{code.co_firstlineno}"
    _GIVEN_FUNCTIONS[name] = function   # the latest call's function is the run's
    return name


def parse_partition(spec: str) -> PartitionSpec:
    """Check the syntax of ``--partition`` without any data, so a run can refuse a typo
    before it loads data or starts processes."""
    if isinstance(spec, str) and spec in _GIVEN_FUNCTIONS:
        return PartitionSpec("function", function=spec)
    text = spec.strip() if isinstance(spec, str) else ""
    name, _, rest = text.partition(":")
    args = rest.split(":") if rest else []
    if name in ("iid", "natural"):
        if rest:
            raise UserError(f"{named('partition')} {spec!r}: {name} takes no parameter; write "
                            f"'{name}'")
        return PartitionSpec(name)
    if name == "pathological":
        if len(args) != 1:
            raise UserError(f"{named('partition')} {spec!r} is malformed; write "
                            "pathological:K, e.g. pathological:2")
        return PartitionSpec(name, shards=_whole(args[0], spec, "pathological:K needs K"))
    if name == "inner-dirichlet":
        if len(args) != 1:
            raise UserError(f"{named('partition')} {spec!r} is malformed; write "
                            "inner-dirichlet:ALPHA, e.g. inner-dirichlet:0.5")
        return PartitionSpec(name, alpha=_alpha(args[0], spec))
    if name in SIZE_LAWS:
        if len(args) > 1:
            raise UserError(f"{named('partition')} {spec!r} is malformed; write {name} or "
                            f"{name}:MIN, e.g. {name}:10")
        minimum = _whole(args[0], spec, f"{name}:MIN needs MIN") if args else None
        return PartitionSpec(name, min_size=minimum)
    if name == "dirichlet":
        if len(args) not in (1, 2):
            raise UserError(f"{named('partition')} {spec!r} is malformed; write "
                            "dirichlet:ALPHA or dirichlet:ALPHA:MIN, e.g. dirichlet:0.5")
        min_size = _whole(args[1], spec, "dirichlet:ALPHA:MIN needs MIN") \
            if len(args) == 2 else None
        return PartitionSpec("dirichlet", alpha=_alpha(args[0], spec), min_size=min_size)
    if name == "shards":
        if len(args) != 1:
            raise UserError(f"{named('partition')} {spec!r} is malformed; write shards:K, "
                            "e.g. shards:2")
        return PartitionSpec("shards", shards=_whole(args[0], spec, "shards:K needs K"))
    if name and rest and _names_a_function(rest) and not _misspelt_built_in(name):
        return PartitionSpec("function", function=text)
    hint = _close_to(name, rest) or colon_hint(text)
    raise UserError(f"unknown {named('partition')} {spec!r}{hint}; "
                    f"choose {PARTITION_CHOICES}")


BUILT_IN_PARTITIONS = ("natural", "iid", "dirichlet", "shards", "pathological",
                       "inner-dirichlet", *SIZE_LAWS)
#: How close a name must be to a built-in to be taken for its typo: at 0.6 'mine' (a user's
#: module) was 'linear'; typos of one letter ('shard', 'iidd', 'dirichlt') are above 0.85.
TYPO_CUTOFF = 0.7


def _names_a_function(attribute: str) -> bool:
    """Whether ``module:ATTRIBUTE`` can name a function: ``dirichlt:0.5`` cannot, and is a
    typo of a built-in, not a module to import."""
    return all(part.isidentifier() for part in attribute.split("."))


def _misspelt_built_in(name: str) -> bool:
    """``shard:make``: a name close to a built-in that no module answers to is a typo (a
    plain name only: a dotted one or a path is clearly the user's module)."""
    import importlib.util

    if "." in name or "/" in name or "\\" in name \
            or closest(name, BUILT_IN_PARTITIONS, TYPO_CUTOFF) is None:
        return False
    try:
        return importlib.util.find_spec(name) is None
    except (ImportError, ValueError):
        return True


def _close_to(name: str, rest: str) -> str:
    close = closest(name, BUILT_IN_PARTITIONS, TYPO_CUTOFF)
    if close is None:
        return ""
    keep = rest and close != "iid" and not _names_a_function(rest)
    return f" (did you mean {close}{':' + rest if keep else ''}?)"


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


def user_partition(function: str, targets: torch.Tensor, clients: int,
                   seed: int) -> list[torch.Tensor]:
    """Call ``function(targets, clients, seed)`` and check what it returns, so a mistake in
    it is one line naming the problem instead of a crash rounds into training."""
    from ..imports import load_object

    split = _GIVEN_FUNCTIONS.get(function) or load_object(function, named('partition'))
    where = f"partition function {function}"
    with raised_by_users_code(where):
        produced = split(targets, clients, seed)
    if isinstance(produced, (str, bytes)) or not hasattr(produced, "__len__"):
        raise UserError(f"{where} returned {type(produced).__name__}; it must return a list "
                        "of index lists, one per client")
    if len(produced) != clients:
        raise UserError(f"{where} returned {len(produced)} parts for {named('clients')} "
                        f"{clients}; it must return one index list per client")
    samples = len(targets)
    parts = [_user_part(part, client, samples, where) for client, part in enumerate(produced)]
    _refuse_overlap(parts, where)
    return [part.sort().values for part in parts]


def _user_part(part, client: int, samples: int, where: str) -> torch.Tensor:
    try:
        # A copy: numpy views with negative strides (a[::-1]) cannot become tensors.
        # A tensor part is copied by torch (numpy 2 warns of a tensor's __array__).
        values = part.detach().cpu().clone() if torch.is_tensor(part) \
            else torch.as_tensor(np.array(part))
    except (TypeError, ValueError, RuntimeError):
        raise UserError(f"{where} returned {type(part).__name__} for client {client}; each "
                        "part must be a sequence of sample indices") from None
    if values.numel() == 0:
        raise UserError(f"{where} left client {client} empty; every client needs at least "
                        "one sample")
    if values.dim() != 1 or values.dtype == torch.bool or values.dtype.is_floating_point \
            or values.dtype.is_complex:
        raise UserError(f"{where} returned {values.dtype} values of shape "
                        f"{tuple(values.shape)} for client {client}; each part must be a flat "
                        "sequence of integer sample indices")
    values = values.to(torch.int64)
    bad = values[(values < 0) | (values >= samples)]
    if len(bad):
        raise UserError(f"{where} returned index {int(bad[0])} for client {client}; indices "
                        f"must be in 0..{samples - 1} (the training set has {samples} samples)")
    return values


def _refuse_overlap(parts: list[torch.Tensor], where: str) -> None:
    indices = torch.cat(parts)
    owners = torch.repeat_interleave(torch.arange(len(parts)), torch.tensor([len(p) for p in
                                                                             parts]))
    order = torch.argsort(indices, stable=True)
    indices, owners = indices[order], owners[order]
    repeated = torch.nonzero(indices[1:] == indices[:-1]).flatten()
    if len(repeated):
        at = int(repeated[0])
        sample, first, second = int(indices[at]), int(owners[at]), int(owners[at + 1])
        place = f"twice in client {first}" if first == second \
            else f"in clients {first} and {second}"
        raise UserError(f"{where} returned overlapping indices: sample {sample} is {place}")


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


def _alpha(text: str, spec: str) -> float:
    try:
        alpha = float(text)
    except ValueError:
        alpha = math.nan
    if not (math.isfinite(alpha) and alpha > 0):
        raise UserError(f"{named('partition')} {spec!r}: ALPHA must be a number > 0, e.g. "
                        "dirichlet:0.5 (smaller means more label skew)")
    return alpha


def _whole(text: str, spec: str, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise UserError(f"{named('partition')} {spec!r}: {what} to be a whole number >= 1")
    return value
