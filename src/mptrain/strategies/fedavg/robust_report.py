"""fedavg's side of ``--aggregator``, ``--malicious-fraction`` and ``--attack`` (issue 41):
the settings resolved from the config, what this run must offer them (refused up front in
one line), and what they add to the banner, the round's line, its notes and summary.json.
The maths is in ``mptrain.federated.robust*`` and ``attacks``; the worker's part in
``federated.robust_server.RobustServer``."""

from __future__ import annotations

import psutil

from ...data.sources import CLASSIFICATION
from ...errors import UserError
from ...errors import setting_name as named   # as the caller spelled the setting
from .robust_worker import gathered_memory_refusal, size_text, table_refusal
from ..model_state import floating_state
from .settings import robust_settings_of
from .shared import TABLE_LIMIT_BYTES, table_rows

#: What rank 0's server reports of the rule and the attackers each round.
ROBUST_KEYS = ("malicious", "malicious_reported", "malicious_selected", "selected",
               "skipped", "bounded", "update_norm_median", "weiszfeld_iterations",
               "forged_nonfinite")


def check_robust(config, data, model, plan) -> None:
    """What the rule and the attack need from this run: the round's updates in one table
    (shared by the workers, or gathered to rank 0 under torchrun; refused with the figures
    when it does not fit), class labels to flip."""
    robust = robust_settings_of(config)
    numel = sum(t.numel() for t in floating_state(model))
    rows = table_rows(config)
    refusal = table_refusal(robust, rows, numel, TABLE_LIMIT_BYTES, plan.comm.shares_memory)
    if not refusal and not plan.comm.shares_memory and plan.rank_zero_here:
        # Shared tables are counted with /dev/shm's (``shared_bytes``); rank 0's own here.
        refusal = gathered_memory_refusal(robust, rows, numel, plan.workers,
                                          plan.local_workers or plan.workers,
                                          psutil.virtual_memory().available)
    if refusal:
        raise UserError(refusal)
    if robust.attack is not None and robust.attack.name == "label-flip" \
            and data.task != CLASSIFICATION:
        raise UserError(f"{named('attack')} label-flip flips class labels; this data set "
                        f"is regression: choose another {named('attack')}")


def describe(config, model, shares_memory: bool = True) -> list[str]:
    """The banner's parts: the rule and the memory of its table (shared by the workers,
    or under torchrun rank 0's own), the attackers."""
    robust, lines = robust_settings_of(config), []
    if robust.rule.name != "mean":
        numel = sum(t.numel() for t in floating_state(model))
        rows = table_rows(config)
        figures = (f"{rows} clients x {numel:,} parameters x 4 bytes = "
                   f"{size_text(rows * numel * 4)}")
        where = f"every update in a shared table, {figures}" if shares_memory else \
            (f"every update gathered to rank 0, {figures} there (each other rank holds "
             "its own clients' updates)")
        lines.append(f"aggregator {robust.rule.describe()}: {where}")
    if robust.attack is not None:
        lines.append(f"attack {robust.attack.describe()} by {len(robust.malicious)} of "
                     f"{config.fedavg.clients} clients ({named('malicious_fraction')} "
                     f"{config.fedavg.malicious_fraction:g}, fixed by the seed)")
    return lines


def round_parts(extras: dict) -> list[str]:
    """The round line's parts: attackers sampled, and selected by a Krum-style rule."""
    if extras.get("malicious") is None:
        return []
    count = extras["malicious"]
    chosen = f", {extras['malicious_selected']} selected" \
        if extras.get("malicious_selected") is not None else ""
    return [f"{count} attacker{'' if count == 1 else 's'}{chosen}"]


def round_notes(index: int, extras: dict) -> list[str]:
    notes = []
    if extras.get("forged_nonfinite"):
        notes.append(f"round {index}: ALIE's forged update (mean + Z std) is past float32; "
                     f"its {extras['forged_nonfinite']} attacker(s) were dropped as a "
                     "non-finite update")
    if extras.get("skipped"):
        notes.append(f"round {index}: skipped ({extras['skipped']}); the model did not move")
    return notes


def summary_fields(config, rounds_skipped: int) -> dict:
    robust, f = robust_settings_of(config), config.fedavg
    fields = {"aggregator": f.aggregator}
    if robust.active:
        fields.update({"attack": f.attack, "malicious_fraction": f.malicious_fraction,
                       "malicious_clients": len(robust.malicious),
                       "rounds_skipped": rounds_skipped})
    return fields
