"""What a fedavg run says about itself: one row of metrics per round from every rank's
report, the console line and the notes the user must see, summary.json's fields and the
banner. The parent calls these through ``FedAvgStrategy``; nothing here trains."""

from __future__ import annotations

from pathlib import Path

from ...errors import setting_name as named   # as the caller spelled the setting
from ...report.console import metric_parts
from ...report.words import count
from . import personal_report
from . import robust_report as robust
from . import virtual_clock
from .settings import accountant_name, privacy_delta, server_optimizer
from .client_metrics import FILE_NAME
from .shared import CONTROLS_FILE, controls_placement, uses_shared_table
from .train_evaluation import train_eval_row

#: Rounds in a row of a lone trained client's non-finite update that mean the run diverged.
LONE_CLIENT_ROUNDS = 3
#: Keys rank 0 reports for the server, copied into the round's row as they are.
SERVER_KEYS = ("epsilon", "dp_clip", "client_path")


def round_row(reports, watch: "DivergenceWatch") -> dict:
    """One round's metrics from every rank's ``RoundReport`` (their ``extras`` are the
    workers' ``RoundTally`` and rank 0's server figures); ``watch`` says whether the run
    diverged."""
    extras = [r.extras for r in reports]
    clients = sum(e.get("clients", 0) for e in extras)
    failed = sorted(c for e in extras for c in e.get("failed_clients", ()))
    nonfinite = sorted(c for e in extras for c in e.get("nonfinite_clients", ()))
    loss_sum = sum(e.get("client_loss_sum", 0.0) for e in extras)
    trained = clients - len(failed) - sum(e.get("untrained", 0) for e in extras)
    row = {"round": reports[0].index + 1, "clients": clients,
           "mean_client_loss": loss_sum / trained if trained else None,
           "failed_clients": failed, "reported": sum(e.get("reported", 0) for e in extras),
           "dropped": sum(e.get("dropped", 0) for e in extras),
           "partial": sum(e.get("partial", 0) for e in extras),
           "round_s": max(r.evaluated_at for r in reports)
           - min(r.train_started for r in reports)}
    if nonfinite:
        row["nonfinite_clients"] = nonfinite
    unstacked = sum(e.get("unstacked_clients", 0) for e in extras)
    if unstacked:
        row["unstacked_clients"] = unstacked
        row["unstacked_reason"] = next(e["unstacked_reason"] for e in extras
                                       if e.get("unstacked_clients"))
    diverged = watch.check(row)
    if diverged:
        row["diverged"] = diverged
    server = extras[0]   # rank 0 speaks for the server
    row.update({key: server[key] for key in (*SERVER_KEYS, *robust.ROBUST_KEYS,
                                             *virtual_clock.ROUND_KEYS) if key in server})
    row.update(train_eval_row(extras))
    if server.get("privacy_stop"):
        row["stopped"] = "privacy budget"
    return row


class DivergenceWatch:
    """Whether the global model itself is broken: every client that trained this round
    sent a non-finite update -- at least two of them, or a lone client three rounds in a
    row (one client's bad data leaves the others finite, and is dropped and counted).
    Dropping them all and going on would change nothing in any later round (seen:
    SCAFFOLD at lr 0.1 on shards:2 spun through 930 such rounds)."""

    def __init__(self):
        self.rounds_all_nonfinite = 0   # in a row

    def check(self, row: dict) -> str | None:
        """The reason the run diverged at ``row``'s round, or None."""
        nonfinite = row.get("nonfinite_clients", [])
        # failed_clients holds the non-finite ones too; those trained.
        trained = row["clients"] - len(row["failed_clients"]) + len(nonfinite)
        if nonfinite and len(nonfinite) == trained:
            self.rounds_all_nonfinite += 1
        else:
            self.rounds_all_nonfinite = 0
        round_number = row["round"]
        if trained >= 2 and self.rounds_all_nonfinite:
            return (f"every client's update was non-finite in round {round_number} "
                    f"({trained} clients)")
        if self.rounds_all_nonfinite >= LONE_CLIENT_ROUNDS:
            return (f"every client's update was non-finite in rounds "
                    f"{round_number - LONE_CLIENT_ROUNDS + 1}-{round_number}")
        return None


def round_line(metrics) -> list[str]:
    """What a round's console line shows after ``round 3/10``."""
    extras, parts = metrics.extras, []
    if extras.get("clients") is not None:
        parts.append(f"{extras['clients']} clients")
        if extras.get("reported", extras["clients"]) != extras["clients"]:
            parts.append(f"{extras['reported']} reported")
    if extras.get("virtual_time_s") is not None:
        lost = [f"{extras[key]} {key}" for key in ("late", "offline", "cancelled")
                if extras.get(key)]
        seconds = extras["virtual_time_s"]
        said = f"{seconds:,.0f}" if seconds >= 100 else f"{seconds:.3g}"
        parts.append(f"virtual {said} s" + (f" ({', '.join(lost)})" if lost else ""))
    if extras.get("epsilon") is not None:
        parts.append(f"ε {extras['epsilon']:.3g}")
    parts += robust.round_parts(extras)
    return parts + client_parts(extras) + metric_parts(metrics)


def client_parts(extras: dict) -> list[str]:
    """An evaluated round's per-client accuracy on the console: the global model's and,
    with --personalize, the personalized models' (a fedbuff step's alike)."""
    parts = []
    if extras.get("client_acc_mean") is not None:
        parts.append(f"clients acc {100 * extras['client_acc_mean']:.1f}% "
                     f"(weighted {100 * extras['client_acc_weighted']:.1f}%, "
                     f"p10 {100 * extras['client_acc_p10']:.1f}%)")
    return parts + personal_report.round_parts(extras)


def client_and_server_extras(f) -> list[str]:
    """The banner's words for FedProx's pull and a server optimizer other than plain
    averaging -- said alike by fedavg and fedbuff."""
    extras = []
    if f.prox_mu:
        extras.append(f"FedProx mu {f.prox_mu:g}")
    optimizer = server_optimizer(f)
    if f.server_optimizer != "sgd" or optimizer.lr != 1.0 or f.server_momentum:
        extras.append(optimizer.describe())
    return extras


def client_notes(metrics, planned: str | None, unit: str) -> list[str]:
    """What the clients of a round (fedbuff: a server step, ``unit``) did that the user must
    know: the path they trained on where it is not the banner's, stacked training that fell
    back, clients dropped for failing or for a non-finite update."""
    extras, index, notes = metrics.extras, metrics.epoch, []
    if extras.get("client_path") is not None and extras["client_path"] != planned:
        notes.append(f"clients: {extras['client_path']}")
    if extras.get("unstacked_clients"):
        notes.append(f"{unit} {index}: stacked training raised ({extras['unstacked_reason']}); "
                     f"{extras['unstacked_clients']} client(s) trained one at a time instead")
    nonfinite = extras.get("nonfinite_clients") or []
    failed = [c for c in extras.get("failed_clients") or [] if c not in nonfinite]
    if failed:
        notes.append(f"{unit} {index}: dropped failing client(s) "
                     f"{', '.join(map(str, failed))} ({named('accept_failures')})")
    if nonfinite:
        notes.append(f"{unit} {index}: dropped client(s) {', '.join(map(str, nonfinite))}: "
                     "non-finite update")
    return notes


def round_notes(config, metrics, planned: str | None = None) -> list[str]:
    """What a round's clients did that the user must know. ``planned``: the path the
    banner said (``ClientPath.describe``); where the workers' differs -- a size from the
    GPU's free memory, which the banner could not tell, or the cohort size of the run a
    resume continues -- the first round says theirs."""
    extras, index = metrics.extras, metrics.epoch
    notes = client_notes(metrics, planned, "round")
    noise = " but the noise" if "epsilon" in extras else ""
    if extras.get("clients") == 0 and extras.get("sampled"):   # the clock dropped them all
        notes.append(f"round {index}: none of the {extras['sampled']} sampled clients "
                     f"reported in time ({extras.get('late', 0)} late, "
                     f"{extras.get('offline', 0)} offline); the round changed nothing{noise}")
    elif extras.get("clients") == 0:
        notes.append(f"round {index}: Poisson sampling drew no client; the round changed "
                     f"nothing{noise}")
    elif extras.get("clients") and extras.get("reported") == 0:
        notes.append(f"round {index}: no sampled client reported; the round changed "
                     f"nothing{noise}")
    notes += robust.round_notes(index, extras)
    if extras.get("stopped"):
        notes.append(f"round {index}: stopped: the next round would spend more than "
                     f"{named('target_epsilon')} {config.fedavg.target_epsilon:g} (epsilon now "
                     f"{extras.get('epsilon'):.3g})")
    return notes


def summary_fields(config, last_epsilon: float | None,
                   stopped_for_privacy_at: int | None) -> dict:
    """fedavg's entries of summary.json."""
    f = config.fedavg
    fields = {"rounds": f.rounds, "clients": f.clients,
              "clients_per_round": f.sampled_clients, "local_epochs": f.local_epochs,
              "partition": f.partition, "prox_mu": f.prox_mu,
              "server_optimizer": f.server_optimizer,
              "server_lr": server_optimizer(f).lr,
              "server_momentum": f.server_momentum, "scaffold": f.scaffold,
              "sampling": f.sampling, "dropout_rate": f.dropout_rate,
              "straggler_rate": f.straggler_rate, "straggler_mode": f.straggler_mode,
              "drop_stragglers": f.drop_stragglers}
    if f.private:
        fields.update({"epsilon": last_epsilon, "dp_delta": privacy_delta(f),
                       "dp_noise": f.dp_noise, "dp_clip": f.dp_clip,
                       "accountant": accountant_name(f),
                       "target_epsilon": f.target_epsilon,
                       "stopped_for_privacy_at_round": stopped_for_privacy_at})
    return fields


def describe(config, plan, model, out_dir: Path | None, client_eval_split: str = "train",
             only_sampled: bool = False) -> list[str]:
    """The banner's lines about what fedavg will do; ``client_eval_split``: the rows each
    client is evaluated on (``client_evaluation.evaluation_split``), ``only_sampled``: the
    round's sampled clients only."""
    c, f = config, config.fedavg
    sample = f"{f.sampled_clients} per round" if f.sampling == "fixed" else \
        f"Poisson q={f.sample_rate:g} ({f.sampled_clients} expected per round)"
    lines = [f"{f.clients} clients ({f.partition}), {sample}, "
             f"{count(f.local_epochs, 'local epoch')} of batch {c.batch_size}, "
             f"{count(f.rounds, 'round')}"]
    extras = client_and_server_extras(f)
    if f.scaffold:
        place, need = controls_placement(c, model, out_dir)
        where = "in shared memory" if place == "shm" else \
            f"in a memory-mapped file {Path(out_dir) / CONTROLS_FILE}"
        extras.append(f"SCAFFOLD: client variates {need / 2**20:,.1f} MiB {where}")
    if f.dropout_rate or f.straggler_rate:
        extras.append(f"unreliable clients: {f.dropout_rate:g} drop out, "
                      f"{f.straggler_rate:g} straggle"
                      + (" (exactly that share of each round's clients, "
                         + ("1 whole local epoch" if f.local_epochs == 2 else
                            f"1 to {f.local_epochs - 1} whole local epochs")
                         + " each, as FedProx's code)"
                         if f.straggler_mode == "exact" and f.straggler_rate else "")
                      + (" (their partial work dropped)" if f.drop_stragglers else ""))
    if f.dp_clip is not None:
        extras.append(_privacy_line(f))
    if f.eval_train:
        extras.append("the training set scored with the test set")
    if f.client_eval_rounds:
        extras.append(client_evaluation_line(f.client_eval_rounds, client_eval_split,
                                             only_sampled, out_dir,
                                             last_only=f.client_eval_every is None))
    if f.accept_failures:
        extras.append("failing clients are dropped from their round")
    if plan.comm.shares_memory and not uses_shared_table(c, model, plan):
        extras.append("round results too large for a shared table: averaged per worker, "
                      f"so the last bits depend on {named('workers')}")
    if extras:
        lines.append(" · ".join(extras))
    if f.client_speeds:
        lines.append(virtual_clock.describe(config))
    return lines + robust.describe(c, model, plan.comm.shares_memory)


def client_evaluation_line(every: int, split: str, only_sampled: bool,
                           out_dir: Path | None, last_only: bool = False,
                           unit: str = "round") -> str:
    """``last_only``: --personalize without --client-eval-every scores the last round (a
    fedbuff ``unit``: server step)."""
    when = f"after the last {unit}" if last_only else \
        f"every {unit}" if every == 1 else f"every {every} {unit}s"
    who = f"the {unit}'s clients" if only_sampled else "every client"
    rows = "each on its own test split" if split == "test" else \
        "each on its training rows (pooled data: no per-client test split)"
    where = f", rows in {FILE_NAME}" if out_dir is not None else ""
    return f"{who} evaluated {when}, {rows}{where}"


def _privacy_line(f) -> str:
    clip = f"clip {f.dp_clip:g}" + (f" adapting to quantile {f.dp_clip_quantile:g}"
                                     if f.dp_clip_quantile is not None else "")
    if not f.private:
        return f"updates clipped ({clip}), no noise: no privacy guarantee"
    target = f", stop before epsilon {f.target_epsilon:g}" \
        if f.target_epsilon is not None else ""
    return (f"DP-FedAvg: {clip}, noise multiplier {f.dp_noise:g}, delta {privacy_delta(f):g}, "
            f"{accountant_name(f)} accountant{target}")
