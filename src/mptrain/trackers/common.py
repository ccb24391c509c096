"""What the trackers share: the numbers of a metrics row, the run's hyperparameters, and
``trackers.json`` in --out, which names each tracker's run so that a resumed run continues
it instead of starting a second one."""

from __future__ import annotations

import json
import math
from pathlib import Path

from ..callbacks import Callback
from ..errors import Interrupted, RunInterrupted

RECORD = "trackers.json"


class Tracker(Callback):
    """A callback that writes a run to an experiment tracker (see ``mptrain.trackers``)."""

    #: The ``--logger`` name, which is also the name of its pip extra.
    name = ""
    #: The library, as the error for a missing one says it.
    library = ""

    def __init__(self, out_dir: Path | None, tb_dir: Path | None, warn):
        self.out_dir, self.tb_dir, self.warn = out_dir, tb_dir, warn

    @classmethod
    def required_modules(cls) -> tuple[str, ...]:
        """Top-level modules that must be importable (checked without importing them)."""
        return ()

    @classmethod
    def check_place(cls, out_dir: Path | None, tb_dir: Path | None) -> None:
        """Refuse (``UserError``) when the tracker has nowhere to write."""

    def where(self) -> str:
        """Where it writes, for the banner."""
        return self.name


def scalars(row: dict, skip: tuple[str, ...] = ("epoch",)) -> dict[str, float]:
    """The finite numbers of ``row`` (a metrics row or a summary), by name; lists, text,
    None and infinities (a zero-second round's rate) are left out."""
    return {key: float(value) for key, value in row.items()
            if key not in skip and isinstance(value, (int, float))
            and not isinstance(value, bool) and math.isfinite(value)}


def hyperparameters(config, run_info: dict) -> dict:
    """The run's settings and where its data and model came from, flat."""
    values = dict(config.as_dict())
    values.update({k: v for k, v in run_info.items() if k not in values})
    return values


def simple(value):
    """``value`` as a bool, int, float or str (what every tracker's parameters take)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return "none" if value is None else value
    return str(value)


def ended_by_stop(error: BaseException) -> bool:
    """Whether the run was stopped (Ctrl-C, SIGTERM) rather than failed."""
    return isinstance(error, (KeyboardInterrupt, Interrupted, RunInterrupted))


def recorded_run(out_dir: Path | None, name: str) -> dict | None:
    """What tracker ``name`` recorded about its run in ``out_dir`` (None if nothing)."""
    if out_dir is None:
        return None
    try:
        entry = json.loads((out_dir / RECORD).read_text()).get(name)
    except (OSError, ValueError, AttributeError):
        return None
    return entry if isinstance(entry, dict) else None


def record_run(out_dir: Path | None, name: str, entry: dict) -> None:
    """Keep ``entry`` (a run id, a URI) for tracker ``name`` in ``out_dir``/trackers.json."""
    if out_dir is None:
        return
    from ..report.outputs import write_json

    try:
        record = json.loads((out_dir / RECORD).read_text())
        if not isinstance(record, dict):
            record = {}
    except (OSError, ValueError):
        record = {}
    record[name] = entry
    write_json(out_dir / RECORD, record)
