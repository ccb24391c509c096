"""A robust rule over whole rows at once: what the fedavg server computes block by block over
its table (``federated.robust.table``), as the rule tests' reference."""

from __future__ import annotations

from typing import Sequence

import torch

from mptrain.federated.robust.row_wise import gram_matrix
from mptrain.federated.robust.rules import RobustRule, RuleDecision


def aggregate(rule: RobustRule, rows: torch.Tensor, weights: Sequence[float],
              global_flat: torch.Tensor | None = None
              ) -> tuple[torch.Tensor, RuleDecision | None]:
    """The rule's aggregate of ``rows`` and its decision (None for a coordinate-wise rule)."""
    decision = rule.decide(gram_matrix(rows, global_flat), weights) if rule.row_wise else None
    if global_flat is None:
        global_flat = torch.zeros(rows.shape[1:], dtype=rows.dtype)
    return rule.combine(rows, weights, decision, global_flat), decision
