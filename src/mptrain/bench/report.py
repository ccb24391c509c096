"""What a bench leaves: a table on the terminal, bench.json, bench.csv and bench.png."""

from __future__ import annotations

import csv
import io
from dataclasses import asdict
from pathlib import Path

from rich.table import Table

from ..engine.profile import PHASES, describe
from ..report.outputs import atomic_write, write_json
from ..report.plots import new_figure, save_png
from .matrix import Cell, reference_of, speedup_baseline
from .stats import (UNSTEADY_SPREAD, compute_seconds_per_sample, efficiency, paired_ratios,
                    speedup, spread, worth_noting_steal)

#: A cell whose workers compute each sample this much slower than one process alone gets a
#: note: the cores slow each other down, whatever the strategy.
SLOWER_COMPUTE = 1.10


def cell_rows(cells: list[Cell], records: list) -> list[dict]:
    """One row per cell: medians with min-max over its repeats, and the speed-up and
    efficiency as paired ratios (each run against its baseline's run of the same repeat)."""
    timed = [r for r in records if not r.memory_sampled]
    sampled = [r for r in records if r.memory_sampled]
    by_cell = {cell: [r for r in timed if r.cell == cell] for cell in cells}
    memory_by_cell = {cell: [r for r in sampled if r.cell == cell and r.ok] for cell in cells}
    speeds = {cell: {r.repeat: r.samples_per_s for r in by_cell[cell] if r.ok} for cell in cells}
    compute = {cell: {r.repeat: compute_seconds_per_sample(r.epochs, cell.workers)
                      for r in by_cell[cell] if r.ok} for cell in cells}
    rows = []
    for cell in cells:
        ok = [r for r in by_cell[cell] if r.ok]
        reference, single = reference_of(cell, cells), speedup_baseline(cell, cells)
        rows.append({
            "strategy": cell.strategy, "workers": cell.workers, "threads": cell.threads,
            "label": cell.label, "reference": cell.reference, "unit": cell.unit,
            "runs": len(by_cell[cell]),
            "failed": sum(not r.ok for r in records if r.cell == cell),
            "error": next((r.error for r in records if r.cell == cell and not r.ok), None),
            "start_method": _start_methods(r for r in records if r.cell == cell and r.ok),
            "client_path": next((r.client_path for r in ok if r.client_path), None),
            "startup_s": spread([r.startup_s for r in ok]),
            "epoch_s": spread([r.epoch_s for r in ok]),
            "samples_per_s": spread([r.samples_per_s for r in ok]),
            "speedup": paired_ratios(speeds[cell], speeds.get(single, {}), speedup),
            "speedup_over": single.label if single else None,
            "efficiency": paired_ratios(
                speeds[cell], speeds.get(reference, {}),
                lambda value, base, n=cell.workers: efficiency(value, n, base)),
            "efficiency_over": reference.label if reference else None,
            # A rank's compute per sample against the 1-thread reference's, paired: below 1
            # with more threads, above 1 when processes computing at once slow each other.
            "compute_per_sample": paired_ratios(compute[cell], compute.get(reference, {}),
                                                lambda value, base: value / base),
            "test_accuracy": spread([r.test_accuracy for r in ok]),
            "test_loss": spread([r.test_loss for r in ok]),
            "time_to_accuracy_s": spread([r.time_to_accuracy_s for r in ok]),
            "peak_rss_bytes": spread([r.peak_rss_bytes for r in memory_by_cell[cell]]),
            "peak_pss_bytes": spread([r.peak_pss_bytes for r in memory_by_cell[cell]]),
            "time_shares": {phase: spread([(r.time_shares or {}).get(phase) for r in ok])
                            for phase in PHASES},
        })
    return rows


def time_lines(rows: list[dict]) -> list[str]:
    """Where each cell's step time went (median shares over its runs): what separates a
    cell that scales from one that waits."""
    lines = []
    for row in rows:
        shares = {phase: row["time_shares"][phase]["median"] for phase in PHASES}
        if any(value is None for value in shares.values()):
            continue
        line = f"  {row['label']}: {describe(shares)}"
        slower = row["compute_per_sample"]["median"]
        if slower is not None and not row["reference"]:
            line += f"; compute per sample {slower:.2f}x the 1-thread reference's"
        lines.append(line)
    return ["where the ranks' step time went (median shares):"] + lines if lines else []


def time_header(rows: list[dict]) -> str:
    units = {row["unit"] for row in rows}
    return f"s/{units.pop()}" if len(units) == 1 else "s/unit"


def render_table(rows: list[dict], target: float | None) -> Table:
    table = Table(title="mptrain bench: medians (min-max) over repeats", title_style="bold")
    for name in ("cell", "start s", time_header(rows), "samples/s", "speedup", "eff.",
                 "accuracy" if any(r["test_accuracy"]["n"] for r in rows) else "test loss",
                 *(["to {:.1%} s".format(target)] if target is not None else []),
                 "RSS MiB", "PSS MiB"):
        table.add_column(name, justify="left" if name == "cell" else "right")
    mixed = time_header(rows) == "s/unit"
    for row in rows:
        if row["samples_per_s"]["n"] == 0:
            table.add_row(row["label"], f"[red]failed: {row['error']}[/red]")
            continue
        score = row["test_accuracy"] if row["test_accuracy"]["n"] else row["test_loss"]
        percent = row["test_accuracy"]["n"] > 0
        per_unit = _num(row["epoch_s"], "{:.2f}") + (f" /{row['unit']}" if mixed else "")
        cells = [row["label"], _num(row["startup_s"], "{:.2f}"), per_unit,
                 _range(row["samples_per_s"]), _paired(row["speedup"]),
                 _paired(row["efficiency"]),
                 _num(score, "{:.2%}" if percent else "{:.4f}")]
        if target is not None:
            tta = row["time_to_accuracy_s"]
            cells.append(_num(tta, "{:.1f}") if tta["n"] else "not reached")
        cells += [_mib(row["peak_rss_bytes"]), _mib(row["peak_pss_bytes"])]
        table.add_row(*cells)
    return table


def footnotes(rows: list[dict], repeats: int | None = None, steal_s: float | None = None,
              wall_s: float = 0.0, cpus: int = 1) -> list[str]:
    """What the ratios are over, the start methods used, and warnings with what to do: for
    unsteady figures, and for CPU the hypervisor took while the bench ran."""
    notes = ["speedup and eff. are medians (min-max) of paired ratios: each run against the "
             "baseline's run of the same repeat; eff. = samples/s / (workers x the 1-thread "
             "reference's samples/s)"]
    baselines = dict.fromkeys((row["speedup_over"], row["efficiency_over"]) for row in rows)
    notes.append("; ".join(f"speedup over {speed}, efficiency over {eff}"
                           for speed, eff in baselines))
    methods = {row["label"]: row["start_method"] for row in rows if row["start_method"]}
    if methods:
        distinct = set(methods.values())
        notes.append(f"workers started by {distinct.pop()}" if len(distinct) == 1 else
                     "start methods: " + ", ".join(f"{k} {v}" for k, v in methods.items()))
    paths: dict = {}   # fedavg: auto's rule may stack one cell's clients, not another's
    for row in rows:
        if row.get("client_path"):
            paths.setdefault(row["client_path"], []).append(row["label"])
    if paths:
        notes.append("fedavg clients: " + "; ".join(
            f"{path} ({', '.join(labels)})" for path, labels in paths.items()))
    unsteady = [row["label"] for row in rows
                if row["speedup"]["unsteady"] or row["efficiency"]["unsteady"]]
    if unsteady:
        more = f"--repeats {max(5, 2 * repeats)}" if repeats else "more --repeats"
        notes.append(f"! too wide to trust (paired ratios spread over "
                     f"{UNSTEADY_SPREAD:.0%} of their median): {', '.join(unsteady)}; re-run "
                     f"with {more} on a quieter machine")
    slowed = [row for row in rows if row["workers"] > 1
              and (row["compute_per_sample"]["median"] or 0) > SLOWER_COMPUTE]
    if slowed:
        factors = sorted(row["compute_per_sample"]["median"] for row in slowed)
        notes.append(f"! the workers of {', '.join(row['label'] for row in slowed)} computed "
                     f"each sample {_span(factors, '{:.2f}')}x slower than one process alone: "
                     "processes computing at once slow each other down on this machine "
                     "(shared caches and memory, or the host's other guests), which alone caps "
                     f"their efficiency near {_span([1 / f for f in factors[::-1]], '{:.2f}')}"
                     ", whatever the strategy; compare strategies with each other, and the "
                     "waiting above, not with 1.00")
    if worth_noting_steal(steal_s, wall_s, cpus):
        notes.append(f"! hypervisor steal: {steal_s:.1f} s of CPU went to other guests of this "
                     f"host during the bench ({steal_s / (wall_s * cpus):.1%} of it), unevenly "
                     "between runs; re-run when the host is quieter, and compare figures only "
                     "within one sitting")
    return notes


def _span(values: list[float], form: str) -> str:
    """``1.14-1.29`` from sorted values (one figure when both ends print alike)."""
    low, high = form.format(values[0]), form.format(values[-1])
    return low if low == high else f"{low}-{high}"


def write_bench_files(out: Path, machine: dict, settings: dict, rows: list[dict],
                      records: list) -> None:
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "bench.json", {"machine": machine, "settings": settings, "cells": rows,
                                    "runs": [_record_dict(r) for r in records]})
    text = io.StringIO()
    fields = ["strategy", "workers", "threads", "unit", "start_method", "runs", "failed",
              "startup_s", "epoch_s", "samples_per_s", "samples_per_s_min",
              "samples_per_s_max", "speedup", "speedup_min", "speedup_max", "speedup_unsteady",
              "efficiency", "efficiency_min", "efficiency_max", "efficiency_unsteady",
              "test_accuracy", "test_loss", "time_to_accuracy_s", "peak_rss_bytes",
              "peak_pss_bytes", "compute_per_sample",
              *(f"{phase}_share" for phase in PHASES)]
    writer = csv.DictWriter(text, fieldnames=fields)
    writer.writeheader()
    for row in rows:
        flat = {k: row[k] for k in ("strategy", "workers", "threads", "unit", "start_method",
                                    "runs", "failed")}
        for key in ("startup_s", "epoch_s", "samples_per_s", "speedup", "efficiency",
                    "test_accuracy", "test_loss", "time_to_accuracy_s", "peak_rss_bytes",
                    "peak_pss_bytes"):
            flat[key] = row[key]["median"]
        for key in ("samples_per_s", "speedup", "efficiency"):
            flat[f"{key}_min"], flat[f"{key}_max"] = row[key]["min"], row[key]["max"]
        for key in ("speedup", "efficiency"):
            flat[f"{key}_unsteady"] = row[key]["unsteady"]
        flat["compute_per_sample"] = row["compute_per_sample"]["median"]
        for phase in PHASES:
            flat[f"{phase}_share"] = row["time_shares"][phase]["median"]
        writer.writerow(flat)
    atomic_write(out / "bench.csv", lambda handle: handle.write(text.getvalue().encode()))
    plot_bench(out / "bench.png", rows)


def plot_bench(path: Path, rows: list[dict]) -> None:
    figure = new_figure((11, 4))
    speed_axis, score_axis = figure.subplots(1, 2)
    use_accuracy = any(r["test_accuracy"]["n"] for r in rows)
    for strategy in dict.fromkeys(r["strategy"] for r in rows if not r["reference"]):
        mine = sorted((r for r in rows if r["strategy"] == strategy and not r["reference"]
                       and r["samples_per_s"]["n"]), key=lambda r: r["workers"])
        if not mine:
            continue
        workers = [r["workers"] for r in mine]
        speed_axis.errorbar(workers, [r["samples_per_s"]["median"] for r in mine],
                            yerr=_errors(mine, "samples_per_s"), marker="o", capsize=3,
                            label=strategy)
        key = "test_accuracy" if use_accuracy else "test_loss"
        score_axis.plot(workers, [r[key]["median"] for r in mine], marker="o", label=strategy)
    for reference, style in zip((r for r in rows if r["reference"] and r["samples_per_s"]["n"]),
                                (":", "--")):
        speed_axis.axhline(reference["samples_per_s"]["median"], color="grey", linestyle=style,
                           label=reference["label"])
    speed_axis.set(xlabel="workers", ylabel="train samples/s", title="throughput")
    score_axis.set(xlabel="workers", title="test accuracy" if use_accuracy else "test loss")
    for axis in (speed_axis, score_axis):
        axis.grid(alpha=0.3)
        axis.legend()
    save_png(figure, path)


def _errors(rows, key):
    return [[r[key]["median"] - r[key]["min"] for r in rows],
            [r[key]["max"] - r[key]["median"] for r in rows]]


def _record_dict(record) -> dict:
    data = asdict(record)
    data["cell"] = record.cell.label
    return data


def _num(stats: dict, fmt: str) -> str:
    return fmt.format(stats["median"]) if stats["n"] else "-"


def _range(stats: dict) -> str:
    if not stats["n"]:
        return "-"
    if stats["n"] == 1:
        return f"{stats['median']:,.0f}"
    return f"{stats['median']:,.0f} ({stats['min']:,.0f}-{stats['max']:,.0f})"


def _paired(stats: dict) -> str:
    """0.97, or 0.97 (0.95-0.99) over several repeats; a trailing ! when too wide to trust."""
    if not stats["n"]:
        return "-"
    text = f"{stats['median']:.2f}"
    if stats["n"] > 1:
        text += f" ({stats['min']:.2f}-{stats['max']:.2f})"
    return f"[yellow]{text} ![/yellow]" if stats["unsteady"] else text


def _start_methods(records) -> str | None:
    """The start methods the runs used, e.g. "fork"; None when no run started workers."""
    methods = sorted({r.start_method for r in records if r.start_method})
    return ", ".join(methods) or None


def _mib(stats: dict) -> str:
    return f"{stats['median'] / 2**20:,.0f}" if stats["n"] else "-"
