"""What ``--personalize`` adds to what a fedavg run says: the personalized models' figures
beside the global model's in each evaluated round's row (``personal_acc_mean``,
``personal_acc_weighted``, ``personal_acc_p10``, ...: the summary ``client_stats`` makes of
the global model, over the same clients and rows), ``personal_accuracy`` and
``personal_loss`` in each client's row of client_metrics.jsonl, the console's part and the
banner's line (the method, and the memory and disk its state takes)."""

from __future__ import annotations

from pathlib import Path

from ...federated.client_accuracy import ClientScores
from ...federated.client_stats import summarize
from ...report.words import human_bytes
from .personal_setup import spec_of, store_plan


def joined_personal(reports) -> tuple[ClientScores | None, int]:
    """Every rank's ``personal_scores`` of the round as one (None when none scored), and
    how many of the clients had personal state."""
    parts = [r.extras["personal_scores"] for r in reports if "personal_scores" in r.extras]
    if not parts:
        return None, 0
    joined = ClientScores.joined([ClientScores.from_lists(p) for p in parts])
    return joined, sum(int(p.get("personalized", 0)) for p in parts)


def personal_summary(scores: ClientScores, personalized: int) -> dict:
    """The round's personalized figures, named ``personal_*``."""
    figures = summarize(scores.samples, scores.correct, scores.loss_sum)
    named = {key.replace("client_", "personal_", 1): value for key, value in figures.items()}
    named["clients_evaluated_personal"] = named.pop("clients_evaluated")
    named["clients_personalized"] = personalized
    return named


def with_personal(rows: list[dict], scores: ClientScores) -> list[dict]:
    """``rows`` (``client_metrics.client_rows``) with each client's personalized accuracy
    and loss."""
    accuracy, loss = scores.accuracy().tolist(), scores.loss().tolist()
    position = {client: i for i, client in enumerate(scores.clients)}
    for row in rows:
        i = position.get(row["client"])
        if i is not None:
            row["personal_accuracy"], row["personal_loss"] = accuracy[i], loss[i]
    return rows


def round_parts(extras: dict) -> list[str]:
    """The console line's part: the personalized models' accuracy."""
    if extras.get("personal_acc_mean") is None:
        return []
    return [(f"personal acc {100 * extras['personal_acc_mean']:.1f}% "
             f"(weighted {100 * extras['personal_acc_weighted']:.1f}%, "
             f"p10 {100 * extras['personal_acc_p10']:.1f}%)")]


def banner_line(config, model, out_dir: Path | None) -> str | None:
    """What the run personalizes, and where its personal state lives."""
    spec = spec_of(config)
    if spec is None:
        return None
    line = f"personalized: {spec.describe()}"
    if spec.method == "fedrep":
        from ...federated.personal.spec import DEFAULT_HEAD_EPOCHS

        epochs = config.fedavg.personal_head_epochs or DEFAULT_HEAD_EPOCHS
        line += f" (head {epochs} epoch(s), then the body {config.fedavg.local_epochs})"
    placement = store_plan(config, model, out_dir)
    if placement is not None:
        from ...federated.personal.store import STORE_FILE

        line += (f"; personal state {human_bytes(placement.memory_bytes)} in shared memory "
                 f"({placement.memory_rows:,} of {placement.clients:,} clients)")
        if placement.disk_rows:
            line += (f", {human_bytes(placement.disk_bytes)} in a memory-mapped file "
                     f"{Path(out_dir) / STORE_FILE}")
    return line + "; scored beside the global model on each client's own rows"


def summary_fields(config, last: dict) -> dict:
    """summary.json's entries: the method and the last evaluation's personalized figures."""
    if config.fedavg.personalize is None:
        return {}
    return {"personalize": config.fedavg.personalize, **last}
