"""What a fedbuff run says about itself: a server step's figures (virtual time, version,
staleness of each applied update, clients in flight), its row of metrics and console line,
the notes the user must see, summary.json's fields (with the staleness histogram) and the
banner. Nothing here trains."""

from __future__ import annotations

from ...errors import setting_name as named   # as the caller spelled the setting
from ...report.console import metric_parts
from ...report.words import count
from ..fedavg import report as fedavg_report
from ..fedavg.settings import server_optimizer
from .clock import DEFAULT_SPEEDS
from .settings import buffer_size_of, concurrency_of, staleness_weight_of

#: Rank 0's figures of a step, copied into its row as they are.
STEP_KEYS = ("virtual_time_s", "version", "staleness", "in_flight", "buffered",
             "stale_dropped", "lost")


def step_figures(plan) -> dict:
    """Server step ``plan.index``'s figures (``schedule.StepPlan``)."""
    return {"virtual_time_s": plan.time_s, "version": plan.index + 1,
            "staleness": [u.staleness for u in plan.applies], "in_flight": plan.in_flight,
            "buffered": len(plan.applies), "stale_dropped": len(plan.stale),
            "lost": len(plan.lost)}


def round_row(reports, watch) -> dict:
    """fedavg's row of the clients trained (``clients``: those that started from this
    version) and the step's figures."""
    row = fedavg_report.round_row(reports, watch)
    server = reports[0].extras
    row.update({key: server[key] for key in STEP_KEYS if key in server})
    return row


def round_line(metrics) -> list[str]:
    extras, parts = metrics.extras, []
    if extras.get("version") is not None:
        staleness = extras.get("staleness") or [0]
        parts += [f"v{extras['version']}", f"t {virtual_seconds(extras['virtual_time_s'])}",
                  f"{extras.get('clients', 0)} trained",
                  f"staleness max {max(staleness)}"]
    return parts + fedavg_report.client_parts(extras) + metric_parts(metrics)


def virtual_seconds(seconds: float) -> str:
    """A virtual time as the console line shows it: 0.225s, 93.1s, 4,210s, 27.5h."""
    if seconds < 100:
        return f"{seconds:.3g}s"
    if seconds < 36_000:
        return f"{seconds:,.0f}s"
    return f"{seconds / 3600:,.1f}h"


def round_notes(metrics, planned: str | None) -> list[str]:
    """The clients' failures and the path they train on, as fedavg says them."""
    return fedavg_report.client_notes(metrics, planned, "step")


def summary_fields(config, schedule, last_step: int | None) -> dict:
    """fedbuff's entries of summary.json: its settings, the virtual time and the histogram
    of the applied updates' staleness over every step run (a resumed run's too)."""
    f = config.fedavg
    done = -1 if last_step is None else last_step
    histogram = schedule.staleness_counts(done) if schedule is not None else {}
    return {"rounds": f.rounds, "clients": f.clients, "concurrency": concurrency_of(f),
            "buffer_size": buffer_size_of(f),
            "staleness_weight": staleness_weight_of(f).spec,
            "max_staleness": f.max_staleness, "local_epochs": f.local_epochs,
            "partition": f.partition, "prox_mu": f.prox_mu,
            "server_optimizer": f.server_optimizer, "server_lr": server_optimizer(f).lr,
            "client_speeds": f.client_speeds or DEFAULT_SPEEDS,
            "availability_trace": f.availability_trace,
            "virtual_time_s": schedule.plan(done).time_s if done >= 0 and schedule else None,
            "staleness_histogram": {str(k): v for k, v in histogram.items()}}


def describe(config, out_dir=None, client_eval_split: str = "train",
             only_sampled: bool = False) -> list[str]:
    """The banner's lines: K, B and the staleness weight in one, then the clock (and which
    clients are scored on which rows, as fedavg says it: ``client_eval_split``,
    ``only_sampled``)."""
    c, f = config, config.fedavg
    concurrency, buffer = concurrency_of(f), buffer_size_of(f)
    kind = "FedAsync" if buffer == 1 else "FedBuff"
    dropped = f", older than {f.max_staleness} dropped" if f.max_staleness is not None else ""
    lines = [f"{kind}: {concurrency} clients training at once, a server step every "
             f"{count(buffer, 'update')}, staleness weight "
             f"{staleness_weight_of(f).describe()}{dropped}; {f.clients} clients "
             f"({f.partition}), {count(f.local_epochs, 'local epoch')} of batch "
             f"{c.batch_size}, {count(f.rounds, 'server step')}"]
    extras = fedavg_report.client_and_server_extras(f)
    extras.append(f"virtual clock: speeds {f.client_speeds}" if f.client_speeds else
                  f"virtual clock: the default speeds ({DEFAULT_SPEEDS}: FedScale's "
                  f"lognormal(1, 0.6) x 5 ms a sample; {named('client_speeds')} to choose)")
    if f.availability_trace:
        extras.append(f"online per {f.availability_trace}")
    if f.eval_train:
        extras.append("the training set scored with the test set")
    if f.client_eval_rounds:
        extras.append(fedavg_report.client_evaluation_line(
            f.client_eval_rounds, client_eval_split, only_sampled, out_dir,
            last_only=f.client_eval_every is None, unit="server step"))
    if f.accept_failures:
        extras.append("failing clients are dropped")
    return lines + [" · ".join(extras)]
