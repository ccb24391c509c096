"""``--aggregator``'s rule resolved for a run (the string's parsing: ``robust_spec``) -- what it
assumes about the number of clients, and how a round's server applies it (decide once over
whole rows, then combine one block of columns at a time; see ``robust``).

Which rules weigh clients by their data: ``mean`` (FedAvg), ``multi-krum`` (the selected
updates' weighted mean, as Flower does), ``norm-bound`` (FedAvg of the bounded updates,
Sun et al.) and ``geometric-median`` (RFA's weighted geometric median). ``median``,
``trimmed-mean``, ``krum`` and ``bulyan`` treat every update alike, as their papers do.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Sequence

import torch

from ...errors import UserError
from ...errors import setting_name as named   # as the caller spelled the setting
from . import row_wise as robust
from .spec import DEFAULT_BETA, ROW_WISE, SELECTING, AggregatorSpec

def most_attackers(name: str, n: int) -> int:
    """The largest F the rule's assumption allows with ``n`` clients (Krum: n > 2F+2,
    Bulyan: n > 4F+3); -1 when none does."""
    if name == "bulyan":
        return (n - 4) // 4
    return (n - 3) // 2


def fewest_clients(name: str, f: int) -> int:
    """The fewest reporting clients the rule's assumption allows for ``f`` attackers."""
    return {"krum": 2 * f + 3, "multi-krum": 2 * f + 3, "bulyan": 4 * f + 4}.get(name, 1)


@dataclass(frozen=True)
class RoundPlan:
    """What a row-wise rule decided from the round's whole rows: the aggregate is
    ``sum_i coefficients[i] x_i + center_weight * center`` (Bulyan: the coordinate-wise
    step over ``selected``); ``selected`` are positions in the reporting rows."""

    coefficients: tuple[float, ...] = ()
    center_weight: float = 0.0
    selected: tuple[int, ...] = ()
    bounded: int = 0          # norm-bound: updates scaled down
    iterations: int = 0       # geometric-median: Weiszfeld's
    update_norm: float = 0.0  # the median length of the round's updates


class RobustRule:
    """A parsed ``--aggregator`` resolved for a run that samples ``clients_per_round``
    clients: F and M fixed, and the assumption checked up front."""

    def __init__(self, spec: AggregatorSpec, clients_per_round: int):
        self.spec, self.name = spec, spec.name
        self.clients_per_round = clients_per_round
        self.f = spec.f
        if self.name in SELECTING and self.f is None:
            self.f = max(0, most_attackers(self.name, clients_per_round))
        self.beta = DEFAULT_BETA if spec.beta is None else spec.beta
        self.check_clients(clients_per_round)

    @property
    def row_wise(self) -> bool:
        return self.name in ROW_WISE

    @property
    def selecting(self) -> bool:
        return self.name in SELECTING

    def check_clients(self, clients_per_round: int) -> None:
        """Refuse a run whose rounds could never meet the rule's assumption."""
        need = fewest_clients(self.name, self.f or 0)
        if clients_per_round < need:
            bound = "4F+3" if self.name == "bulyan" else "2F+2"
            most = most_attackers(self.name, clients_per_round)
            fix = f"give F <= {most} or more {named('clients_per_round')}" if most >= 0 \
                else f"give {named('clients_per_round')} {need} or more"
            raise UserError(f"{self.name} with F={self.f} needs more than {bound} = "
                            f"{need - 1} clients per round, got {clients_per_round}: {fix}")
        if self.spec.m is not None and self.spec.m > clients_per_round - self.f:
            raise UserError(f"multi-krum:F,M averages M of the n - F best updates: M "
                            f"{self.spec.m} is more than {clients_per_round} - {self.f} "
                            f"= {clients_per_round - self.f}: give M <= "
                            f"{clients_per_round - self.f}")

    def too_few(self, reporting: int) -> str | None:
        """Why a round with ``reporting`` clients cannot be aggregated (None: it can)."""
        need = fewest_clients(self.name, self.f or 0)
        if 0 < reporting < need:
            bound = "4F+3" if self.name == "bulyan" else "2F+2"
            return f"{reporting} clients reported; {self.name} with F={self.f} needs " \
                   f"more than {bound} = {need - 1}"
        return None

    def describe(self) -> str:
        """The rule and its parameters, for the banner."""
        if self.name == "trimmed-mean":
            return f"trimmed mean ({self._trimmed()})"
        if self.selecting:
            # Dropouts and Poisson sampling make short rounds: say which are skipped.
            need = f"a round needs {fewest_clients(self.name, self.f)} reports, fewer is " \
                   "skipped"
            if self.name == "multi-krum":
                m = f"M {self.spec.m}" if self.spec.m is not None else "M = n - F"
                return f"Multi-Krum (F {self.f}, {m}: {need})"
            return f"{self.name.capitalize()} (F {self.f}: {need})"
        if self.name == "norm-bound":
            return f"norm bounding (C {self.spec.bound:g})"
        return self.name.replace("-", " ")

    def _trimmed(self) -> str:
        """What beta cuts at the clients per round; when nothing, that the rule is then
        the unweighted mean, and the smallest BETA that cuts one."""
        n = self.clients_per_round
        cut = robust.trimmed_count(n, self.beta)
        text = f"beta {self.beta:g}: {cut} of {n} cut from each end"
        if cut:
            return text
        text += ", the unweighted mean"
        smallest = math.ceil(100 / n) / 100   # rounded up: it must cut one
        if self.beta > 0 and smallest < 0.5:
            text += f": give BETA >= {smallest:g} to cut one"
        return text

    # -- a round ---------------------------------------------------------------------------------
    def plan(self, gram: torch.Tensor, weights: Sequence[float]) -> RoundPlan:
        """The row-wise decision from the Gram matrix of the reporting rows' updates."""
        plan = self._decide(gram, weights)
        norm = float(gram.diagonal().clamp(min=0).sqrt().median()) if len(gram) else 0.0
        return dataclasses.replace(plan, update_norm=norm)

    def _decide(self, gram: torch.Tensor, weights: Sequence[float]) -> RoundPlan:
        n = gram.shape[0]
        total = float(sum(weights))
        if self.name in ("krum", "multi-krum"):
            m = 1 if self.name == "krum" else min(self.spec.m or n - self.f, n - self.f)
            chosen = robust.krum_select(robust.squared_distances(gram), self.f, max(1, m))
            if self.name == "krum":
                coefficients = [1.0 if i == chosen[0] else 0.0 for i in range(n)]
            else:
                mass = sum(weights[i] for i in chosen)
                coefficients = [weights[i] / mass if i in chosen else 0.0
                                for i in range(n)]
            return RoundPlan(tuple(coefficients), selected=tuple(sorted(chosen)))
        if self.name == "bulyan":
            chosen = robust.bulyan_select(robust.squared_distances(gram), self.f)
            return RoundPlan(selected=tuple(sorted(chosen)))
        if self.name == "norm-bound":
            scales = robust.norm_bound_scales(gram, self.spec.bound)
            coefficients = [w * float(s) / total for w, s in zip(weights, scales)]
            return RoundPlan(tuple(coefficients), center_weight=1.0 - sum(coefficients),
                             bounded=int((scales < 1).sum()))
        if self.name == "geometric-median":
            coefficients, iterations = robust.weiszfeld(gram, weights)
            return RoundPlan(tuple(coefficients.tolist()), iterations=iterations)
        raise ValueError(f"{self.name} is not a row-wise rule")

    def combine(self, rows: torch.Tensor, weights: Sequence[float],
                plan: RoundPlan | None = None,
                center: torch.Tensor | None = None) -> torch.Tensor:
        """The aggregate of one block of columns of the reporting rows (``plan`` from
        ``plan`` for row-wise rules; ``center``: the same block of the global model)."""
        if self.name == "mean":
            total = float(sum(weights))
            return robust.combine_rows(rows, [w / total for w in weights])
        if self.name == "median":
            return robust.coordinate_median(rows)
        if self.name == "trimmed-mean":
            return robust.trimmed_mean(rows, self.beta)
        if self.name == "bulyan":
            return robust.bulyan_combine(rows[list(plan.selected)], self.f)
        return robust.combine_rows(rows, plan.coefficients, center, plan.center_weight)


def aggregate(rule: RobustRule, rows: torch.Tensor, weights: Sequence[float],
              center: torch.Tensor | None = None) -> tuple[torch.Tensor, RoundPlan | None]:
    """The rule over whole rows at once (what the sliced server computes block by block)."""
    plan = rule.plan(robust.gram_matrix(rows, center), weights) if rule.row_wise else None
    if center is None:
        center = torch.zeros(rows.shape[1:], dtype=rows.dtype)
    return rule.combine(rows, weights, plan, center), plan
