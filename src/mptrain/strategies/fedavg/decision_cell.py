"""A row-wise rule's decision handed from the worker that makes it (rank 0) to the others
through shared memory: the fedavg workers' side of ``federated.robust.table.decide_round``."""

from __future__ import annotations

import torch

from ...federated.robust.rules import RuleDecision


class DecisionCell:
    """A round's ``RuleDecision`` in one shared float64 tensor, so that the worker that
    decides can hand it to the others (written before a barrier, read after it).

    Layout: ``[coefficients (rows) | selected flags (rows) | global_weight, bounded,
    iterations, n, update_norm]``."""

    def __init__(self, rows: int):
        self.rows = rows
        self.tensor = torch.zeros(2 * rows + 5, dtype=torch.float64)

    def write(self, decision: RuleDecision, n: int) -> None:
        t, rows = self.tensor, self.rows
        t.zero_()
        if decision.coefficients:
            t[:n] = torch.tensor(decision.coefficients, dtype=torch.float64)
        for position in decision.selected:
            t[rows + position] = 1.0
        t[2 * rows:] = torch.tensor([decision.global_weight, decision.bounded,
                                     decision.iterations, n, decision.update_norm],
                                    dtype=torch.float64)

    def read(self) -> RuleDecision:
        t, rows = self.tensor, self.rows
        global_weight, bounded, iterations, n, norm = t[2 * rows:].tolist()
        n = int(n)
        selected = tuple(int(i) for i in torch.nonzero(t[rows:rows + n]).flatten())
        return RuleDecision(tuple(t[:n].tolist()), global_weight=global_weight,
                            selected=selected, bounded=int(bounded),
                            iterations=int(iterations), update_norm=norm)
