"""One fedavg worker's part of ``--aggregator``, ``--malicious-fraction`` and ``--attack``,
round by round: on the client's side (train or not, on flipped labels or not; the update it
sends) and on the server's side (ALIE forged, the rule's decision, the aggregate of the
worker's slice of the columns, the round's metrics). The settings are resolved in
``federated.robust.settings``, the maths is ``federated.robust``'s.

Shared state, and why it is safe: between the round's first barrier (every row and weight
written) and the last, ALIE's rows are written column slice by column slice, each slice by
its one worker, then a barrier; the decision is written by rank 0 alone into
``DecisionCell`` while the others wait at the next barrier, and only read after it (the
group's barriers are built on a lock and a condition: full memory barriers, on aarch64 too).
Every choice that decides how many barriers a round has (ALIE or not, skipped or not,
row-wise or not) is a function of the weights and the sample, which every worker reads alike
after the first barrier.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from ...federated import availability
from ...federated.client import update_is_finite
from ...federated.personal.held import carry_global_
from ...federated.robust.attacks import alie_z, attack_row_, flip_labels
from ...federated.robust.settings import RobustSettings
from ...federated.robust.table import (aggregate_slice, decide_round, forge_alie_slice_,
                                       reporting_slots, row_is_finite)
from .decision_cell import DecisionCell


class RobustWorker:
    """One worker's part of the rule and the attack, round by round."""

    def __init__(self, settings: RobustSettings, decision_cell: DecisionCell | None, seed: int,
                 classes: int | None, held: Sequence[tuple[int, int]] = ()):
        self.settings, self.cell = settings, decision_cell
        #: Columns no client sends (a layered personalization's personal tensors): an
        #: attacker's row carries the global model's values there, as an honest one does.
        self.held = list(held)
        self.seed, self.classes = seed, classes
        self.rule, self.attack = settings.rule, settings.attack

    # -- the client's side -----------------------------------------------------------------
    def is_malicious(self, client: int) -> bool:
        return client in self.settings.malicious

    def trains(self, client: int) -> bool:
        """Whether ``client`` trains this round (attackers that only forge do not)."""
        return not self.is_malicious(client) or self.attack.trains

    def targets(self, client: int) -> Callable[[torch.Tensor], torch.Tensor] | None:
        """The transform of ``client``'s training labels (label flipping), or None."""
        if self.is_malicious(client) and self.attack.name == "label-flip":
            return lambda targets: flip_labels(targets, self.classes)
        return None

    def send_(self, client: int, row: torch.Tensor, global_flat: torch.Tensor,
              round_index: int) -> None:
        """Turn ``client``'s result in ``row`` into what it sends (honest: unchanged). An
        attacker that did not train starts from the global model ``global_flat``."""
        if not self.is_malicious(client):
            return
        if not self.attack.trains:
            row.copy_(global_flat)
        if not self.attack.at_server:
            attack_row_(self.attack, row, global_flat, self.seed, round_index, client)
        carry_global_(row, self.held, global_flat)

    def forge(self, client: int, row: torch.Tensor, global_flat: torch.Tensor,
              round_index: int, tally, dropout_rate: float, claimed: float) -> float:
        """An attacker that does not train (gaussian, ALIE) writes what it sends into its
        ``row`` and claims the weight an honest client of its size would (``claimed``: the
        samples of --local-epochs over its data); returns that weight. Dropped like anyone
        else's when non-finite, and it drops out like everyone else (``tally`` counts it)."""
        self.send_(client, row, global_flat, round_index)
        if not update_is_finite(row):
            tally.nonfinite.append(client)
            return 0.0
        if availability.drops_out(self.seed, round_index, client, dropout_rate):
            tally.dropped += 1
            return 0.0
        tally.reported += 1
        return float(claimed)

    # -- the server's side -----------------------------------------------------------------
    def aggregate(self, table: torch.Tensor, weights: Sequence[float], sampled: Sequence[int],
                  global_flat: torch.Tensor, columns: slice, rank: int,
                  barrier: Callable[[], None]) -> tuple[torch.Tensor | None, dict]:
        """The aggregate of ``columns`` (None: the round is skipped or nobody reported)
        and, on rank 0, the round's metrics. Called by every worker after the barrier that
        follows the clients; ``global_flat`` is the global model the round started from."""
        kept = reporting_slots(weights)
        bad = [slot for slot in kept if self.is_malicious(sampled[slot])]
        metrics = {}
        if self.settings.malicious:
            metrics = {"malicious": sum(1 for c in sampled if self.is_malicious(c)),
                       "malicious_reported": len(bad)}
        if self.attack is not None and self.attack.at_server and bad:
            honest = [slot for slot in kept if slot not in bad]
            z = self.attack.value if self.attack.value is not None \
                else alie_z(len(kept), len(bad))
            forge_alie_slice_(table, honest, bad, columns, z)
            barrier()   # every slice forged before any worker reads whole rows
            if not row_is_finite(table[bad[0]]):
                # Z std past float32: the forged rows (all alike) are inf. Dropped like
                # any non-finite update, whoever sent it; every worker reads the same row
                # after the barrier, so all decide alike.
                metrics.update(forged_nonfinite=len(bad), malicious_reported=0)
                kept, bad = honest, []
        if not kept:
            return None, metrics
        skipped = self.rule.too_few(len(kept))
        if skipped:
            return None, {**metrics, "skipped": skipped}
        kept_weights = [weights[slot] for slot in kept]
        decision = None
        if self.rule.row_wise:
            if rank == 0:
                self.cell.write(decide_round(self.rule, table, kept, kept_weights, global_flat),
                                len(kept))
            barrier()   # the decision written, global_flat read whole, before any step
            decision = self.cell.read()
            metrics.update(self._decision_metrics(decision, kept, bad))
        return aggregate_slice(self.rule, table, kept, kept_weights, columns, global_flat,
                               decision), metrics if rank == 0 else {}

    def _decision_metrics(self, decision, kept, bad) -> dict:
        out = {"update_norm_median": decision.update_norm}
        if self.rule.selecting:
            out["selected"] = len(decision.selected)
            if self.settings.malicious:
                bad_positions = {kept.index(slot) for slot in bad}
                out["malicious_selected"] = sum(1 for p in decision.selected if p in bad_positions)
        if self.rule.name == "norm-bound":
            out["bounded"] = decision.bounded
        if self.rule.name == "geometric-median":
            out["weiszfeld_iterations"] = decision.iterations
        return out
