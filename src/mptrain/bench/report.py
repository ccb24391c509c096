"""What a bench leaves: a table on the terminal, bench.json, bench.csv and bench.png."""

from __future__ import annotations

import csv
import io
from dataclasses import asdict
from pathlib import Path

from rich.table import Table

from ..report.outputs import atomic_write, write_json
from .matrix import Cell
from .stats import efficiency, speedup, spread


def cell_rows(cells: list[Cell], records: list) -> list[dict]:
    """One row per cell: medians with min-max over its repeats, and the derived ratios."""
    timed = [r for r in records if not r.memory_sampled]
    sampled = [r for r in records if r.memory_sampled]
    by_cell = {cell: [r for r in timed if r.cell == cell] for cell in cells}
    memory_by_cell = {cell: [r for r in sampled if r.cell == cell and r.ok] for cell in cells}
    reference = spread([r.samples_per_s for r in by_cell[cells[0]] if r.ok])["median"]
    single = next((c for c in cells if c.strategy == "single" and not c.reference), cells[0])
    single_speed = spread([r.samples_per_s for r in by_cell[single] if r.ok])["median"]
    rows = []
    for cell in cells:
        ok = [r for r in by_cell[cell] if r.ok]
        speed = spread([r.samples_per_s for r in ok])
        rows.append({
            "strategy": cell.strategy, "workers": cell.workers, "threads": cell.threads,
            "label": cell.label, "reference": cell.reference,
            "runs": len(by_cell[cell]),
            "failed": sum(not r.ok for r in records if r.cell == cell),
            "error": next((r.error for r in records if r.cell == cell and not r.ok), None),
            "startup_s": spread([r.startup_s for r in ok]),
            "epoch_s": spread([r.epoch_s for r in ok]),
            "samples_per_s": speed,
            "speedup": speedup(speed["median"], single_speed),
            "efficiency": efficiency(speed["median"], cell.workers, reference),
            "test_accuracy": spread([r.test_accuracy for r in ok]),
            "test_loss": spread([r.test_loss for r in ok]),
            "time_to_accuracy_s": spread([r.time_to_accuracy_s for r in ok]),
            "peak_rss_bytes": spread([r.peak_rss_bytes for r in memory_by_cell[cell]]),
            "peak_pss_bytes": spread([r.peak_pss_bytes for r in memory_by_cell[cell]]),
        })
    return rows


def render_table(rows: list[dict], target: float | None) -> Table:
    table = Table(title="mptrain bench: medians (min-max) over repeats", title_style="bold")
    for name in ("cell", "start s", "s/epoch", "samples/s", "speedup", "eff.",
                 "accuracy" if any(r["test_accuracy"]["n"] for r in rows) else "test loss",
                 *(["to {:.1%} s".format(target)] if target is not None else []),
                 "RSS MiB", "PSS MiB"):
        table.add_column(name, justify="left" if name == "cell" else "right")
    for row in rows:
        if row["samples_per_s"]["n"] == 0:
            table.add_row(row["label"], f"[red]failed: {row['error']}[/red]")
            continue
        score = row["test_accuracy"] if row["test_accuracy"]["n"] else row["test_loss"]
        percent = row["test_accuracy"]["n"] > 0
        cells = [row["label"], _num(row["startup_s"], "{:.2f}"), _num(row["epoch_s"], "{:.2f}"),
                 _range(row["samples_per_s"]), _ratio(row["speedup"]),
                 _ratio(row["efficiency"]),
                 _num(score, "{:.2%}" if percent else "{:.4f}")]
        if target is not None:
            tta = row["time_to_accuracy_s"]
            cells.append(_num(tta, "{:.1f}") if tta["n"] else "not reached")
        cells += [_mib(row["peak_rss_bytes"]), _mib(row["peak_pss_bytes"])]
        table.add_row(*cells)
    return table


def write_bench_files(out: Path, machine: dict, settings: dict, rows: list[dict],
                      records: list) -> None:
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "bench.json", {"machine": machine, "settings": settings, "cells": rows,
                                    "runs": [_record_dict(r) for r in records]})
    text = io.StringIO()
    fields = ["strategy", "workers", "threads", "runs", "failed", "startup_s", "epoch_s",
              "samples_per_s", "samples_per_s_min", "samples_per_s_max", "speedup",
              "efficiency", "test_accuracy", "test_loss", "time_to_accuracy_s",
              "peak_rss_bytes", "peak_pss_bytes"]
    writer = csv.DictWriter(text, fieldnames=fields)
    writer.writeheader()
    for row in rows:
        flat = {k: row[k] for k in ("strategy", "workers", "threads", "runs", "failed",
                                    "speedup", "efficiency")}
        for key in ("startup_s", "epoch_s", "samples_per_s", "test_accuracy", "test_loss",
                    "time_to_accuracy_s", "peak_rss_bytes", "peak_pss_bytes"):
            flat[key] = row[key]["median"]
        flat["samples_per_s_min"] = row["samples_per_s"]["min"]
        flat["samples_per_s_max"] = row["samples_per_s"]["max"]
        writer.writerow(flat)
    atomic_write(out / "bench.csv", lambda handle: handle.write(text.getvalue().encode()))
    plot_bench(out / "bench.png", rows)


def plot_bench(path: Path, rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (speed_axis, score_axis) = plt.subplots(1, 2, figsize=(11, 4))
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
    reference = next((r for r in rows if r["reference"] and r["samples_per_s"]["n"]), None)
    if reference:
        speed_axis.axhline(reference["samples_per_s"]["median"], color="grey", linestyle=":",
                           label="single, 1 thread")
    speed_axis.set(xlabel="workers", ylabel="train samples/s", title="throughput")
    score_axis.set(xlabel="workers", title="test accuracy" if use_accuracy else "test loss")
    for axis in (speed_axis, score_axis):
        axis.grid(alpha=0.3)
        axis.legend()
    figure.tight_layout()
    atomic_write(path, lambda handle: figure.savefig(handle, format="png", dpi=100))
    plt.close(figure)


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


def _ratio(value) -> str:
    return f"{value:.2f}" if value is not None else "-"


def _mib(stats: dict) -> str:
    return f"{stats['median'] / 2**20:,.0f}" if stats["n"] else "-"
