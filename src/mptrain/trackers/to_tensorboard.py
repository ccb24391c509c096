"""``--logger tensorboard``: an event file per run attempt in ``--out/tb/`` (or ``--tb-dir``):
every round's numbers as scalars (step = epoch / round), the settings in the HParams
dashboard, the summary's numbers and curves.png at the end. A resumed run writes a new
file in the same folder that continues the steps (``tensorboard --logdir runs/`` shows one
run)."""

from __future__ import annotations

from pathlib import Path

from ..callbacks import logger_setting
from ..errors import UserError
from ..errors import setting_name as named   # as the caller spelled the setting
from .common import Tracker, hyperparameters, scalars, simple


class TensorBoardTracker(Tracker):
    name = "tensorboard"
    library = "TensorBoard"

    def __init__(self, out_dir, tb_dir, warn):
        super().__init__(out_dir, tb_dir, warn)
        self.folder = Path(tb_dir) if tb_dir is not None else Path(out_dir) / "tb"
        self.events = None
        self.step = 0   # the last round written

    @classmethod
    def required_modules(cls):
        return ("tensorboard",)

    @classmethod
    def check_place(cls, out_dir, tb_dir):
        if out_dir is None and tb_dir is None:
            raise UserError(f"{logger_setting()} tensorboard needs {named('out')} DIR (events "
                            f"go to DIR/tb/) or {named('tb_dir')} DIR")

    def where(self):
        return f"tensorboard {self.folder}/"

    def on_run_start(self, config, run_info, resumed_at):
        from .tb_events import EventFile

        self.events = EventFile(self.folder)
        self.step = resumed_at or 0
        if resumed_at is not None:
            self.events.restart_at(resumed_at + 1)
        self.events.hparams_start({k: simple(v)
                                   for k, v in hyperparameters(config, run_info).items()})
        self.events.flush()

    def on_round_end(self, row):
        step = row["epoch"]
        if step <= self.step:   # rounds redone after a worker restart
            self.events.restart_at(step)
        self.events.scalars(step, scalars(row))
        self.events.flush()
        self.step = step

    def on_end(self, summary, out_dir):
        self.events.scalars(self.step, {f"summary/{k}": v for k, v in scalars(summary).items()})
        curves = Path(out_dir) / "curves.png" if out_dir is not None else None
        if curves is not None and curves.is_file():
            self.events.image(self.step, "curves", curves.read_bytes())
        self.events.hparams_end()
        self.events.close()

    def on_abort(self, error):
        # No end status: TensorBoard keeps a run's first one, and a failed or stopped run
        # may yet be resumed into this folder and end well.
        if self.events is not None:
            self.events.close()
