"""``mptrain plot``: runs side by side, one metric against one clock, in one PNG."""

from __future__ import annotations

import click

from ..report.compare import X_AXES
from .app import Choice, cli


@cli.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path())
@click.option("--x", "x_axis", type=Choice(tuple(X_AXES)), default="round",
              show_default=True,
              help="The horizontal axis: round (or epoch), virtual_time (the virtual clock of "
                   "a run with --client-speeds) or wall (seconds since the run started).")
@click.option("--y", "y_field", default="test_accuracy", show_default=True,
              help="Any numeric field of the runs' metrics.jsonl: test_loss, train_loss, "
                   "client_acc_mean, ...")
@click.option("--out", type=click.Path(dir_okay=False),
              help="The PNG to write  [default: Y-by-X.png in the working folder]")
def plot(runs, x_axis, y_field, out):
    """Plot the runs in the --out folders RUNS... against each other: --y of each round
    against --x, one line a run, the legend naming each run's strategy and the settings that
    differ between the runs (from their summary.json).

    \b
    mptrain plot runs/sync runs/fedbuff --x virtual_time --y test_accuracy
    mptrain plot runs/a runs/b --x round --y train_loss --out loss.png
    """
    from pathlib import Path

    from ..config import SETTING_NAMES
    from ..errors import UserError
    from ..report.compare import plot_runs, read_run
    from ..rl.config import rl_setting_names

    path = Path(out or f"{y_field}-by-{x_axis}.png")
    if path.suffix.lower() != ".png":
        raise UserError(f"--out {path} must end in .png: mptrain plot writes a PNG")
    if not path.parent.is_dir():
        raise UserError(f"--out {path}: the folder {path.parent} does not exist")
    records = [read_run(run) for run in runs]
    plot_runs(path, records, x_axis, y_field, (*SETTING_NAMES, *rl_setting_names()))
    click.echo(f"wrote {path}")
