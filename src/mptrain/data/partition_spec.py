"""What ``--partition`` says, read without any data (``PartitionSpec``), so a run refuses
a typo before it loads data or starts processes; ``partitions`` makes the cut it names."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import UserError, closest
from ..errors import setting_name as named   # as the caller spelled the setting
from ..imports import colon_hint
from .partition_laws import SIZE_LAWS
from .user_partitions import is_given_function


#: The --partition vocabulary, as a refusal of an unknown one names it.
PARTITION_CHOICES = ("iid, dirichlet:ALPHA[:MIN], shards:K, natural, pathological:K, "
                     "inner-dirichlet:ALPHA, linear[:MIN], square[:MIN], exponential[:MIN], "
                     "or an import string 'package.module:function' / "
                     "'path/to/file.py:function'")


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


def parse_partition(spec: str) -> PartitionSpec:
    """Check the syntax of ``--partition`` without any data, so a run can refuse a typo
    before it loads data or starts processes."""
    if is_given_function(spec):
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
