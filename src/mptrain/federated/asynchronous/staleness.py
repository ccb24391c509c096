"""How much a stale update counts (``--staleness-weight``), without torch: the command line
and the config check the spelling before torch is imported.

An update that started from server version ``v`` and arrives when the server is at ``v + s``
has staleness ``s``; its change is multiplied by ``weight(s)`` before it enters the buffer.
The functions are FedAsync's (Xie et al. 2019, section 5.2), with FedBuff's default (Nguyen
et al. 2022: ``1 / sqrt(1 + s)``, FedAsync's polynomial with ``a = 1/2``):

- ``constant``: 1, whatever the staleness;
- ``polynomial:A``: ``(1 + s) ** -A``;
- ``hinge:A,B``: 1 while ``s <= B``, then ``1 / (A (s - B) + 1)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...errors import UserError
from ...errors import setting_name as named   # as the caller spelled the setting

STALENESS_WEIGHTS = ("constant", "polynomial", "hinge")
#: FedBuff's ``1 / sqrt(1 + s)``.
DEFAULT_STALENESS_WEIGHT = "polynomial:0.5"
STALENESS_HELP = ("how a stale update counts, s its staleness: polynomial:A (1+s)^-A "
                  "(default polynomial:0.5, FedBuff's 1/sqrt(1+s)), constant (1), "
                  "hinge:A,B (1 up to s = B, then 1/(A(s-B)+1): FedAsync's)")


@dataclass(frozen=True)
class StalenessWeight:
    """A parsed ``--staleness-weight``: the function's name and parameters."""

    name: str = "polynomial"
    a: float = 0.5
    b: float = 0.0

    def __call__(self, staleness: int) -> float:
        if staleness < 0:
            raise ValueError(f"staleness {staleness} < 0")
        if self.name == "constant":
            return 1.0
        if self.name == "polynomial":
            return float((1.0 + staleness) ** -self.a)
        return 1.0 if staleness <= self.b else 1.0 / (self.a * (staleness - self.b) + 1.0)

    @property
    def spec(self) -> str:
        """The function as ``--staleness-weight`` spells it (summary.json's)."""
        if self.name == "constant":
            return "constant"
        if self.name == "polynomial":
            return f"polynomial:{self.a:g}"
        return f"hinge:{self.a:g},{self.b:g}"

    def describe(self) -> str:
        """The function as the banner shows it."""
        if self.name == "constant":
            return "constant 1"
        if self.name == "polynomial":
            return "1/sqrt(1+s)" if self.a == 0.5 else f"(1+s)^-{self.a:g}"
        return f"hinge: 1 up to s={self.b:g}, then 1/({self.a:g}(s-{self.b:g})+1)"


def parse_staleness_weight(text: str | None) -> StalenessWeight:
    """``text`` (None: the default) as a :class:`StalenessWeight`, or a one-line UserError
    that says what is wrong."""
    text = DEFAULT_STALENESS_WEIGHT if text is None else text
    if not isinstance(text, str):
        raise UserError(f"{named('staleness_weight')} must be a string such as "
                        f"polynomial:0.5, got {text!r}")
    name, _, params = text.strip().partition(":")
    values = _numbers(text, params)
    if name == "constant" and not params:
        return StalenessWeight("constant", 0.0)
    if name == "polynomial" and len(values) == 1 and values[0] >= 0:
        return StalenessWeight("polynomial", values[0])
    if name == "hinge" and len(values) == 2 and values[0] > 0 and values[1] >= 0:
        return StalenessWeight("hinge", values[0], values[1])
    raise UserError(f"{named('staleness_weight')} {text!r} is none of constant, "
                    "polynomial:A (A >= 0), hinge:A,B (A > 0, B >= 0)")


def _numbers(text: str, params: str) -> list[float]:
    if not params:
        return []
    try:
        values = [float(part) for part in params.split(",")]
    except ValueError:
        raise UserError(f"{named('staleness_weight')} {text!r}: {params!r} are not "
                        "numbers") from None
    if not all(math.isfinite(value) for value in values):
        raise UserError(f"{named('staleness_weight')} {text!r}: the numbers must be finite")
    return values
