"""Experiment trackers: every round of a run, live, where people already watch their runs.

``--logger tensorboard,mlflow,wandb,csv`` (TOML ``logger = [...]``, ``fit(loggers=[...])``).
Each tracker is a :class:`~mptrain.callbacks.Callback` in a module of its own and imports
its library only when a run asks for it: ``mptrain run`` without ``--logger`` imports none
of them. A tracker whose library is missing is refused before anything starts, in one line
that names the extra to install.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import Callable, Iterable

from ..callbacks import logger_setting
from ..errors import UserError
from ..errors import setting_name as named   # as the caller spelled the setting

#: name -> "module:class", imported only when the name is asked for.
TRACKERS = {
    "tensorboard": ".to_tensorboard:TensorBoardTracker",
    "mlflow": ".to_mlflow:MlflowTracker",
    "wandb": ".to_wandb:WandbTracker",
    "csv": ".to_csv:CsvTracker",
}


def tracker_names() -> tuple[str, ...]:
    return tuple(TRACKERS)


def parse_loggers(value) -> tuple[str, ...]:
    """The tracker names in ``value`` (None, ``"tensorboard,csv"``, or a list of names and
    comma-separated names), checked, in order, each once."""
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(i, str) for i in items):
        raise UserError(f"{logger_setting()} takes tracker names ({', '.join(TRACKERS)}), "
                        f"got {value!r}")
    names: list[str] = []
    for item in items:
        for name in (part.strip().lower() for part in item.split(",")):
            if not name:
                continue
            if name not in TRACKERS:
                raise UserError(f"unknown {logger_setting()} {name!r}; choose from: "
                                f"{', '.join(TRACKERS)} (comma-separated)")
            if name not in names:
                names.append(name)
    return tuple(names)


def tracker_class(name: str):
    module, _, attribute = TRACKERS[name].partition(":")
    return getattr(importlib.import_module(module, __name__), attribute)


def make_trackers(names, out_dir: str | Path | None, tb_dir: str | Path | None = None,
                  warn: Callable[[str], None] | None = None, enabled: bool = True) -> list:
    """The trackers called ``names``, writing for the run whose outputs go to ``out_dir``.

    Everything a tracker needs is checked here, before any process starts: its library
    (a ``UserError`` naming the extra), and a place to write (``--out``, ``--tb-dir``,
    ``MLFLOW_TRACKING_URI``). ``enabled``: whether this process logs (under torchrun only
    rank 0 does; the other ranks check the same and get no trackers)."""
    names = parse_loggers(names)
    if tb_dir is not None and "tensorboard" not in names:
        raise UserError(f"{named('tb_dir')} does nothing without {logger_setting()} "
                        f"tensorboard; add it or leave {named('tb_dir')} out")
    out_dir = Path(out_dir) if out_dir is not None else None
    tb_dir = Path(tb_dir) if tb_dir is not None else None
    classes = [tracker_class(name) for name in names]
    for cls in classes:
        missing = [m for m in cls.required_modules() if importlib.util.find_spec(m) is None]
        if missing:
            raise UserError(f"{logger_setting()} {cls.name} needs {cls.library}, which is not "
                            f"installed ({', '.join(missing)}): pip install "
                            f"'mptrain[{cls.name}]'")
        cls.check_place(out_dir, tb_dir)
    if not enabled:
        return []
    return [cls(out_dir=out_dir, tb_dir=tb_dir, warn=warn or (lambda text: None))
            for cls in classes]


def describe(trackers: Iterable) -> str:
    """Where the trackers write, for the banner."""
    return " · ".join(t.where() for t in trackers)
