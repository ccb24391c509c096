"""The names of ``--aggregator`` and ``--attack`` and their parsing, without torch (the
command line offers them, and the config checks them, before torch is imported): a string
becomes an ``AggregatorSpec`` or ``AttackSpec``, or a one-line UserError that says what is
wrong, with the closest name when the name is unknown. What the rules and attacks *do* is in
``rules``, ``row_wise``, ``coordinate_wise`` and ``attacks``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ...errors import UserError, closest
from ...errors import setting_name as named   # as the caller spelled the setting

AGGREGATORS = ("mean", "median", "trimmed-mean", "krum", "multi-krum", "bulyan",
               "norm-bound", "geometric-median")
#: The rules whose aggregate weighs each client by its samples.
WEIGHTED = ("mean", "multi-krum", "norm-bound", "geometric-median")
#: Rules that decide over whole rows (a Gram matrix of the round's updates).
ROW_WISE = ("krum", "multi-krum", "bulyan", "norm-bound", "geometric-median")
#: Rules that pick a subset of the updates (a per-round count of attackers picked).
SELECTING = ("krum", "multi-krum", "bulyan")
DEFAULT_BETA = 0.1
AGGREGATOR_HELP = ("how the server combines the round's client updates: mean | median | "
        "trimmed-mean[:BETA] | krum[:F] | multi-krum[:F[,M]] | bulyan[:F] | norm-bound:C | "
        "geometric-median (default mean). Weighted by client data: mean, multi-krum, "
        "norm-bound, geometric-median; the others treat every client alike. F (attackers "
        "tolerated) defaults to the most the rule allows at --clients-per-round (Krum: "
        "n > 2F+2, Bulyan: n > 4F+3); BETA (cut from each end) to 0.1; M to n - F")


@dataclass(frozen=True)
class AggregatorSpec:
    """An ``--aggregator`` string, parsed: the rule and the parameters given (None: the
    default)."""

    name: str = "mean"
    f: int | None = None
    m: int | None = None
    beta: float | None = None
    bound: float | None = None


def parse_aggregator(text: str) -> AggregatorSpec:
    """``name[:params]`` -> spec; a one-line UserError for what is wrong."""
    name, _, params = str(text).strip().partition(":")
    name = name.strip().lower()
    if name not in AGGREGATORS:
        raise UserError(f"unknown {named('aggregator')} {name!r}"
                        f"{_suggestion(name, AGGREGATORS)}; "
                        f"choose one of {', '.join(AGGREGATORS)}")
    given = params.strip() != "" or text.strip().endswith(":")
    if name in ("mean", "median", "geometric-median"):
        if given:
            raise UserError(f"{named('aggregator')} {name} takes no parameter "
                            f"(got {text!r})")
        return AggregatorSpec(name)
    if name == "trimmed-mean":
        if not given:
            return AggregatorSpec(name)
        beta = _number(params, f"trimmed-mean:BETA needs BETA a number, got {params!r}")
        if not 0 <= beta < 0.5:
            raise UserError(f"trimmed-mean:BETA is the fraction cut from each end: give "
                            f"0 <= BETA < 0.5, got {beta:g}")
        return AggregatorSpec(name, beta=beta)
    if name == "norm-bound":
        if not given:
            raise UserError(f"{named('aggregator')} norm-bound needs its bound: "
                            "norm-bound:C, the longest update (L2) the server accepts, C > 0")
        bound = _number(params, f"norm-bound:C needs C a number, got {params!r}")
        if not bound > 0 or bound == float("inf"):
            raise UserError(f"norm-bound:C needs a finite C > 0, got {params.strip()}")
        return AggregatorSpec(name, bound=bound)
    # krum, multi-krum, bulyan
    if not given:
        return AggregatorSpec(name)
    parts = [p.strip() for p in params.split(",")]
    if len(parts) > (2 if name == "multi-krum" else 1):
        form = "multi-krum:F,M" if name == "multi-krum" else f"{name}:F"
        raise UserError(f"{named('aggregator')} {text!r}: too many parameters; the form "
                        f"is {form}")
    f = _count(parts[0], f"{name}:F is the number of attackers tolerated: a whole number "
                         f">= 0, got {parts[0]!r}")
    m = None
    if len(parts) == 2:
        m = _count(parts[1], f"multi-krum:F,M: M is how many updates are averaged, a "
                             f"whole number >= 1, got {parts[1]!r}")
        if m < 1:
            raise UserError(f"multi-krum:F,M: M is how many updates are averaged, a whole "
                            f"number >= 1, got {m}")
    return AggregatorSpec(name, f=f, m=m)


def _suggestion(name: str, choices: Sequence[str]) -> str:
    close = closest(name, choices, cutoff=0.5)
    return f" (did you mean {close!r}?)" if close else ""


def _number(text: str, message: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise UserError(message) from None
    if value != value:
        raise UserError(message)
    return value


def _count(text: str, message: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise UserError(message) from None
    if value < 0:
        raise UserError(message)
    return value


#: The largest float32 (``torch.finfo(torch.float32).max``, written out: this module runs
#: before torch is imported): an attack's SCALE, STD, LAMBDA or Z beyond it cannot apply.
FLOAT32_MAX = 3.4028234663852886e38
ATTACKS = ("sign-flip", "gaussian", "scaling", "label-flip", "alie")
ATTACK_HELP = ("what the malicious clients (--malicious-fraction) send: sign-flip[:SCALE] "
        "(-SCALE x their update, default 1) | gaussian[:STD] (noise, default STD 1) | "
        "scaling:LAMBDA (LAMBDA x their update) | label-flip (trained on labels "
        "classes-1-y) | alie[:Z] (mean + Z std of the honest updates, Baruch et al. 2019; "
        "Z by default the paper's z_max)")


@dataclass(frozen=True)
class AttackSpec:
    """An ``--attack`` string, parsed."""

    name: str
    value: float | None = None    # SCALE, STD, LAMBDA or Z (None: the default)

    @property
    def trains(self) -> bool:
        """Whether a malicious client trains before sending (its update is the start)."""
        return self.name in ("sign-flip", "scaling", "label-flip")

    @property
    def at_server(self) -> bool:
        """Whether the attack update needs the round's honest updates (ALIE): it is
        written once every client has reported."""
        return self.name == "alie"

    def describe(self) -> str:
        if self.value is None:
            return {"sign-flip": "sign-flip", "gaussian": "gaussian (std 1)",
                    "label-flip": "label-flip", "alie": "ALIE (z_max)"}[self.name]
        label = {"sign-flip": "scale", "gaussian": "std", "scaling": "lambda",
                 "alie": "z"}[self.name]
        return f"{'ALIE' if self.name == 'alie' else self.name} ({label} {self.value:g})"


def parse_attack(text: str) -> AttackSpec:
    """``name[:value]`` -> spec; a one-line UserError for what is wrong."""
    name, colon, param = str(text).strip().partition(":")
    name = name.strip().lower()
    if name not in ATTACKS:
        raise UserError(f"unknown {named('attack')} {name!r}{_suggestion(name, ATTACKS)}; "
                        f"choose one of {', '.join(ATTACKS)}")
    given = bool(colon)
    if name == "label-flip":
        if given:
            raise UserError(f"{named('attack')} label-flip takes no parameter "
                            f"(got {text!r})")
        return AttackSpec(name)
    if name == "scaling" and not given:
        raise UserError(f"{named('attack')} scaling needs its factor: scaling:LAMBDA, "
                        "LAMBDA > 0 (e.g. the clients per round, for model replacement)")
    if not given:
        return AttackSpec(name)
    label = {"sign-flip": "SCALE", "gaussian": "STD", "scaling": "LAMBDA", "alie": "Z"}[name]
    value = _number(param, f"{name}:{label} needs {label} a number, got {param!r}")
    # The attack's arithmetic is float32's (the rows): past its range it overflows.
    if abs(value) > FLOAT32_MAX or (name != "alie" and not value > 0):
        raise UserError(f"{name}:{label} needs a finite {label} > 0, at most {FLOAT32_MAX:.2g} "
                        f"(float32), got {param.strip()}" if name != "alie" else
                        f"alie:Z needs a finite Z, at most {FLOAT32_MAX:.2g} in size "
                        f"(float32), got {param.strip()}")
    return AttackSpec(name, value)
