"""Runs side by side: one metric of several finished (or stopped) runs against one clock, in
one PNG (``mptrain plot``).

A run is its --out folder: metrics.jsonl gives the points (a row a round or epoch, as
``report.metrics.RoundMetrics.as_dict`` wrote it), summary.json the settings that tell the
runs apart in the legend. A stopped run has no summary.json yet; its points still plot.
"""

from __future__ import annotations

import json
import numbers
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserError, did_you_mean
from .plots import new_figure, save_png

#: ``--x`` name -> (the metrics.jsonl field it reads, the axis label; None: the run's unit).
X_AXES = {
    "round": ("epoch", None),
    "virtual_time": ("virtual_time_s", "virtual time (s)"),
    "wall": ("elapsed_s", "wall-clock time since the run started (s)"),
}
#: Summary keys beside the settings that tell runs apart: what was trained on what.
WHAT_RAN = ("data", "model", "env")


@dataclass(frozen=True)
class RunRecord:
    """One run as its folder holds it."""

    name: str          # as the user named the folder
    rows: list         # metrics.jsonl, a dict a round (or epoch)
    summary: dict      # summary.json; empty for a run stopped before writing it

    def numeric_fields(self) -> list[str]:
        """The fields that are a number in at least one row, in the rows' order."""
        seen: dict[str, None] = {}
        for row in self.rows:
            for key, value in row.items():
                if _is_number(value):
                    seen.setdefault(key)
        return list(seen)

    def points(self, x_key: str, y_key: str) -> tuple[list, list]:
        """(xs, ys) of the rows that have both; a round without an evaluation
        (--eval-every) has no point and the line joins its neighbours."""
        pairs = [(row[x_key], row[y_key]) for row in self.rows
                 if _is_number(row.get(x_key)) and _is_number(row.get(y_key))]
        return [x for x, _ in pairs], [y for _, y in pairs]


def read_run(folder: str) -> RunRecord:
    """The run in ``folder`` (its --out), or a ``UserError`` saying what is missing."""
    path = Path(folder)
    metrics = path / "metrics.jsonl"
    if not path.is_dir():
        raise UserError(f"{folder} is not a folder; give the --out folders of runs")
    if not metrics.is_file():
        raise UserError(f"{folder} holds no metrics.jsonl: it is not the --out folder of a run "
                        "(or the run stopped before its first round)")
    rows = []
    for number, line in enumerate(metrics.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except ValueError:
            raise UserError(f"{metrics} line {number} is not JSON; the file was not written "
                            "by mptrain, or was edited") from None
    if not rows:
        raise UserError(f"{metrics} is empty: the run stopped before its first round")
    try:
        summary = json.loads((path / "summary.json").read_text())
    except (OSError, ValueError):
        summary = {}
    return RunRecord(name=folder, rows=rows, summary=summary if isinstance(summary, dict)
                     else {})


def check_axes(runs: list[RunRecord], x_axis: str, y_field: str) -> None:
    """Refuse, naming the run, an axis a run cannot give: no virtual time (a run without a
    clock), or no such metric (naming the metrics it has)."""
    x_key = X_AXES[x_axis][0]
    for run in runs:
        fields = run.numeric_fields()
        if x_key not in fields:
            if x_axis == "virtual_time":
                raise UserError(f"{run.name} has no virtual time: run it with --client-speeds "
                                "(a federated run on a virtual clock), or plot it by --x "
                                "round or --x wall")
            raise UserError(f"{run.name} has no {x_key} in its metrics (a run of an older "
                            "mptrain); plot it by --x round")
        if y_field not in fields:
            raise UserError(f"{run.name} has no metric {y_field!r}"
                            f"{did_you_mean(y_field, fields)}; its metrics are: "
                            f"{', '.join(fields)}")


def legend_labels(runs: list[RunRecord], setting_names) -> list[str]:
    """Each run's name, strategy and the settings whose values differ between the runs (from
    summary.json; a run without one shows its name alone). One run: its name and strategy."""
    keys = [k for k in dict.fromkeys([*WHAT_RAN, *setting_names]) if k != "strategy"]
    differing = [key for key in keys
                 if any(key in run.summary for run in runs)
                 and len({_setting_text(run.summary.get(key)) for run in runs}) > 1]
    labels = []
    for run in runs:
        words = [run.summary["strategy"]] if "strategy" in run.summary else []
        words += [f"{key.replace('_', '-')} {_setting_text(run.summary.get(key))}"
                  for key in differing if key in run.summary]
        labels.append(f"{run.name}: {', '.join(words)}" if words else run.name)
    return labels


def plot_runs(path: Path, runs: list[RunRecord], x_axis: str, y_field: str,
              setting_names) -> None:
    """Write ``y_field`` of every run against ``x_axis`` to the PNG ``path``, atomically."""
    check_axes(runs, x_axis, y_field)
    x_key, x_label = X_AXES[x_axis]
    if x_label is None:
        units = sorted({run.summary.get("unit") or "round" for run in runs})
        x_label = " / ".join(units)
    figure = new_figure((8, 5))
    axis = figure.subplots()
    for run, label in zip(runs, legend_labels(runs, setting_names)):
        xs, ys = run.points(x_key, y_field)
        axis.plot(xs, ys, marker="o" if len(xs) <= 50 else None, markersize=3, label=label)
    axis.set(xlabel=x_label, ylabel=y_field.replace("_", " "),
             title=f"{y_field.replace('_', ' ')} by {x_axis.replace('_', ' ')}")
    if x_axis == "round":
        from matplotlib.ticker import MaxNLocator

        axis.xaxis.set_major_locator(MaxNLocator(integer=True))   # no round 1.25
    axis.grid(alpha=0.3)
    axis.legend(fontsize="small")
    save_png(figure, path)


def _is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _setting_text(value) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):   # server_betas
        return ",".join(_setting_text(v) for v in value)
    return str(value)
