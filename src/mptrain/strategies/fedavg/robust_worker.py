"""``--aggregator`` / ``--malicious-fraction`` / ``--attack`` for one run: the settings
checked together, and what a fedavg worker does with them -- on the client's side (train
or not, on flipped labels or not; the update it sends) and on the server's side (ALIE
forged, the rule's decision, the aggregate of the worker's slice of the columns, the
round's metrics).

Shared state, and why it is safe: between the round's first barrier (every row and weight
written) and the last, ALIE's rows are written column slice by column slice, each slice by
its one worker, then a barrier; the plan is written by rank 0 alone into ``PlanCell``
while the others wait at the next barrier, and only read after it (the group's barriers
are built on a lock and a condition: full memory barriers, on aarch64 too). Every choice
that decides how many barriers a round has (ALIE or not, skipped or not, row-wise or not)
is a function of the weights and the sample, which every worker reads alike after the
first barrier.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from ...comm.dist import gather_buffer_rows
from ...errors import UserError
from ...errors import setting_name as named   # as the caller spelled the setting
from ...federated.robust.attacks import alie_z, attack_row_, flip_labels, malicious_clients
from ...federated.robust.table import (PlanCell, aggregate_slice, forge_alie_slice_, plan_round,
                           reporting_slots, row_is_finite)
from ...federated.robust.rules import RobustRule
from ...federated.robust.spec import AttackSpec, parse_aggregator, parse_attack


@dataclass(frozen=True)
class RobustSettings:
    """The run's rule (``mean`` by default), its attack (None: nobody attacks) and the
    malicious clients."""

    rule: RobustRule
    attack: AttackSpec | None
    malicious: frozenset[int]

    @property
    def active(self) -> bool:
        """Whether the server goes through this module: a rule other than the mean, or an
        attack. Otherwise FedAvg's own server runs, untouched."""
        return self.rule.name != "mean" or self.attack is not None

    @property
    def needs_table(self) -> bool:
        """Whether the round's individual updates must sit in one shared table: for every
        rule but the mean, and for every attack (the attacker writes what it sends into
        its row; ALIE reads the honest rows)."""
        return self.active


def robust_settings(aggregator: str, malicious_fraction: float, attack: str | None,
                    clients: int, clients_per_round: int, seed: int) -> RobustSettings:
    """Parse and check the three settings against each other and the sample size."""
    spec = parse_aggregator(aggregator)
    rule = RobustRule(spec, clients_per_round)
    if not 0 <= malicious_fraction < 1:
        raise UserError(f"{named('malicious_fraction')} is the share of clients that "
                        f"attack: give 0 <= P < 1, got {malicious_fraction:g}")
    parsed = parse_attack(attack) if attack is not None else None
    if parsed is not None and not malicious_fraction:
        raise UserError(f"{named('attack')} {attack} needs attackers: add "
                        f"{named('malicious_fraction')} P (e.g. 0.2)")
    if parsed is None and malicious_fraction:
        raise UserError(f"{named('malicious_fraction')} needs {named('attack')} NAME: what "
                        "the malicious clients send (sign-flip, gaussian, scaling:LAMBDA, "
                        "label-flip, alie)")
    malicious = frozenset(malicious_clients(clients, malicious_fraction, seed)) \
        if parsed is not None else frozenset()
    return RobustSettings(rule, parsed, malicious)


def refuse_combinations(settings: RobustSettings, *, dp: bool, scaffold: bool) -> None:
    """The combinations whose guarantees would not hold, refused in one line."""
    if not settings.active:
        return
    what = _what(settings)
    if dp:
        raise UserError(f"{what} with {named('dp_clip')}/{named('dp_noise')} is refused: "
                        "DP-FedAvg's clip is each client's own step (an attacker would skip "
                        "it) and its noise is calibrated to a sum of clipped updates, not to "
                        f"a robust rule; for a server-side clip use {named('aggregator')} "
                        "norm-bound:C")
    if scaffold:
        raise UserError(f"{what} with {named('scaffold')} is refused: SCAFFOLD's control "
                        "variates are averaged with the plain mean, which the rule and the "
                        "attackers would bypass")


def table_refusal(settings: RobustSettings, rows: int, numel: int, limit: int,
                  shares_memory: bool) -> str | None:
    """Why the rule cannot have the round's updates in one table (None: it can). With
    shared memory the table is shared by every worker; without (torchrun) it is rank 0's
    own, gathered from the others' rows (``strategies.fedavg.gathered``): either way one
    table of ``rows x numel`` floats, counted against ``limit``."""
    if not settings.needs_table:
        return None
    what = _what(settings)
    need = rows * numel * 4
    if need > limit:
        where = "one shared table" if shares_memory else "one table on rank 0"
        return (f"{what} needs every client's update in {where}: {rows} clients x "
                f"{numel:,} parameters x 4 bytes = {size_text(need)}, over the "
                f"{size_text(limit)} limit; sample fewer {named('clients_per_round')}")
    return None


#: The columns after a gathered row's numbers that carry its weight: the float64's bits as
#: two float32s (``strategies.fedavg.gathered``).
WEIGHT_COLUMNS = 2


def gathered_memory_refusal(settings: RobustSettings, rows: int, numel: int, ranks: int,
                            ranks_here: int, available: int) -> str | None:
    """Why rank 0's machine cannot hold the gathered table now (None: it can). Under
    torchrun the table is private memory, not /dev/shm: rank 0's ``rows x numel`` floats;
    for each other rank on its machine, the rows of its own clients of the round (at most
    ``ceil(rows / ranks)``, each with its weight's two columns); and the gather's buffers
    (a block of rows on each of those ranks, and on rank 0 one more per rank: at most
    ``comm.dist.GATHER_BYTES`` and a block) -- counted against the memory ``available``
    now."""
    if not settings.needs_table:
        return None
    row, sent = numel * 4, (numel + WEIGHT_COLUMNS) * 4
    table = rows * row
    share = -(-rows // ranks)
    others = (ranks_here - 1) * share * sent
    buffers = (ranks + ranks_here) * gather_buffer_rows(share, sent, ranks) * sent \
        if ranks > 1 else 0
    if table + others + buffers <= available:
        return None
    theirs = f" + {size_text(others)} for its other {ranks_here - 1} rank(s)' own rows" \
        if others else ""
    gather = f" + {size_text(buffers)} for the gather's buffers" if buffers else ""
    return (f"{_what(settings)} gathers every client's update to rank 0: {rows} clients x "
            f"{numel:,} parameters x 4 bytes = {size_text(table)}{theirs}{gather} on rank "
            f"0's machine, which has {size_text(available)} of memory available; sample "
            f"fewer {named('clients_per_round')}, or free memory there")


def _what(settings: RobustSettings) -> str:
    """What a refusal is about: the rule, or the attack when the rule is the mean."""
    if settings.rule.name != "mean":
        return f"{named('aggregator')} {settings.rule.name}"
    return f"{named('attack')} {settings.attack.name}"


def size_text(nbytes: int) -> str:
    """Bytes for a person: ``512 B``, ``6.4 KiB``, ``3,815.0 MiB``."""
    if nbytes < 1024:
        return f"{nbytes} B"
    if nbytes < 2**20:
        return f"{nbytes / 1024:.1f} KiB"
    return f"{nbytes / 2**20:,.1f} MiB"


class RobustServer:
    """One worker's part of the rule and the attack, round by round."""

    def __init__(self, settings: RobustSettings, plan_cell: PlanCell | None, seed: int,
                 classes: int | None):
        self.settings, self.cell, self.seed, self.classes = settings, plan_cell, seed, classes
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

    def send_(self, client: int, row: torch.Tensor, center: torch.Tensor,
              round_index: int) -> None:
        """Turn ``client``'s result in ``row`` into what it sends (honest: unchanged). An
        attacker that did not train starts from the global model ``center``."""
        if not self.is_malicious(client):
            return
        if not self.attack.trains:
            row.copy_(center)
        if not self.attack.at_server:
            attack_row_(self.attack, row, center, self.seed, round_index, client)

    # -- the server's side -----------------------------------------------------------------
    def aggregate(self, table: torch.Tensor, weights: Sequence[float], sampled: Sequence[int],
                  center: torch.Tensor, columns: slice, rank: int,
                  barrier: Callable[[], None]) -> tuple[torch.Tensor | None, dict]:
        """The aggregate of ``columns`` (None: the round is skipped or nobody reported)
        and, on rank 0, the round's metrics. Called by every worker after the barrier that
        follows the clients; ``center`` is the global model the round started from."""
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
        plan = None
        if self.rule.row_wise:
            if rank == 0:
                self.cell.write(plan_round(self.rule, table, kept, kept_weights, center),
                                len(kept))
            barrier()   # the plan written, and center read whole, before any step
            plan = self.cell.read()
            metrics.update(self._plan_metrics(plan, kept, bad))
        return aggregate_slice(self.rule, table, kept, kept_weights, columns, center,
                               plan), metrics if rank == 0 else {}

    def _plan_metrics(self, plan, kept, bad) -> dict:
        out = {"update_norm_median": plan.update_norm}
        if self.rule.selecting:
            out["selected"] = len(plan.selected)
            if self.settings.malicious:
                bad_positions = {kept.index(slot) for slot in bad}
                out["malicious_selected"] = sum(1 for p in plan.selected if p in bad_positions)
        if self.rule.name == "norm-bound":
            out["bounded"] = plan.bounded
        if self.rule.name == "geometric-median":
            out["weiszfeld_iterations"] = plan.iterations
        return out
