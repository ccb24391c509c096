"""``--aggregator``'s rule resolved for a run (the string's parsing: ``spec``) -- what it
assumes about the number of clients, and how a round's server applies it: decide once over
whole rows (``row_wise``), then combine one block of columns at a time (``coordinate_wise``,
or the decision's weighted sum).

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
from ...comm.reduce import weighted_sum
from . import coordinate_wise, row_wise
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
class RuleDecision:
    """What a row-wise rule decided from the round's whole rows: the aggregate is
    ``sum_i coefficients[i] x_i + global_weight * global_flat`` (Bulyan: the
    coordinate-wise step over ``selected``); ``selected`` are positions in the reporting
    rows."""

    coefficients: tuple[float, ...] = ()
    global_weight: float = 0.0
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
        cut = coordinate_wise.trimmed_count(n, self.beta)
        text = f"beta {self.beta:g}: {cut} of {n} cut from each end"
        if cut:
            return text
        text += ", the unweighted mean"
        smallest = math.ceil(100 / n) / 100   # rounded up: it must cut one
        if self.beta > 0 and smallest < 0.5:
            text += f": give BETA >= {smallest:g} to cut one"
        return text

    # -- a round ---------------------------------------------------------------------------------
    def decide(self, gram: torch.Tensor, weights: Sequence[float]) -> RuleDecision:
        """The row-wise decision from the Gram matrix of the reporting rows' updates."""
        decision = self._decide(gram, weights)
        norm = float(gram.diagonal().clamp(min=0).sqrt().median()) if len(gram) else 0.0
        return dataclasses.replace(decision, update_norm=norm)

    def _decide(self, gram: torch.Tensor, weights: Sequence[float]) -> RuleDecision:
        n = gram.shape[0]
        total = float(sum(weights))
        if self.name in ("krum", "multi-krum"):
            m = 1 if self.name == "krum" else min(self.spec.m or n - self.f, n - self.f)
            chosen = row_wise.krum_select(row_wise.squared_distances(gram), self.f, max(1, m))
            if self.name == "krum":
                coefficients = [1.0 if i == chosen[0] else 0.0 for i in range(n)]
            else:
                mass = sum(weights[i] for i in chosen)
                coefficients = [weights[i] / mass if i in chosen else 0.0
                                for i in range(n)]
            return RuleDecision(tuple(coefficients), selected=tuple(sorted(chosen)))
        if self.name == "bulyan":
            chosen = row_wise.bulyan_select(row_wise.squared_distances(gram), self.f)
            return RuleDecision(selected=tuple(sorted(chosen)))
        if self.name == "norm-bound":
            scales = row_wise.norm_bound_scales(gram, self.spec.bound)
            coefficients = [w * float(s) / total for w, s in zip(weights, scales)]
            return RuleDecision(tuple(coefficients), global_weight=1.0 - sum(coefficients),
                             bounded=int((scales < 1).sum()))
        if self.name == "geometric-median":
            coefficients, iterations = row_wise.weiszfeld(gram, weights)
            return RuleDecision(tuple(coefficients.tolist()), iterations=iterations)
        raise ValueError(f"{self.name} is not a row-wise rule")

    def combine(self, rows: torch.Tensor, weights: Sequence[float],
                decision: RuleDecision | None = None,
                global_flat: torch.Tensor | None = None) -> torch.Tensor:
        """The aggregate of one block of columns of the reporting rows (``decision`` from
        ``decide`` for row-wise rules; ``global_flat``: the same block of the global
        model)."""
        if self.name == "mean":
            total = float(sum(weights))
            return weighted_sum(rows, [w / total for w in weights])
        if self.name == "median":
            return coordinate_wise.coordinate_median(rows)
        if self.name == "trimmed-mean":
            return coordinate_wise.trimmed_mean(rows, self.beta)
        if self.name == "bulyan":
            return coordinate_wise.bulyan_combine(rows[list(decision.selected)], self.f)
        if not decision.global_weight:
            return weighted_sum(rows, decision.coefficients)
        return weighted_sum([*rows, global_flat],
                            [*decision.coefficients, decision.global_weight])
