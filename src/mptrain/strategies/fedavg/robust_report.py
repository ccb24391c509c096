"""What ``--aggregator``, ``--malicious-fraction`` and ``--attack`` (issue 41) add to a fedavg
run's banner, round line, notes and summary.json. The maths is in ``federated.robust``, the
worker's part in ``robust_worker``, the refusals in ``refusals``."""

from __future__ import annotations

from ...errors import setting_name as named   # as the caller spelled the setting
from ...report.words import human_bytes
from ..model_state import floating_state
from .settings import robust_settings_of
from .shared import table_rows

#: What rank 0's server reports of the rule and the attackers each round.
ROBUST_KEYS = ("malicious", "malicious_reported", "malicious_selected", "selected",
               "skipped", "bounded", "update_norm_median", "weiszfeld_iterations",
               "forged_nonfinite")


def describe(config, model, shares_memory: bool = True) -> list[str]:
    """The banner's parts: the rule and the memory of its table (shared by the workers,
    or under torchrun rank 0's own), the attackers."""
    robust, lines = robust_settings_of(config), []
    if robust.rule.name != "mean":
        numel = sum(t.numel() for t in floating_state(model))
        rows = table_rows(config)
        figures = (f"{rows} clients x {numel:,} parameters x 4 bytes = "
                   f"{human_bytes(rows * numel * 4)}")
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
