"""``mptrain.fit``: the Python entry point; the CLI is a thin layer over the same path."""

from __future__ import annotations

import multiprocessing
import pickle
import sys
from pathlib import Path

import torch.nn as nn

from .checkpoint import Checkpoint, resolve_resume
from .config import TrainConfig, TrainingDefaults, applicable_settings
from .data.shared import materialize
from .data.sources import DataBundle, infer_task
from .errors import UserError
from .launch.start_method import choose_start_method
from .launch.tuning import threads_per_worker
from .launch.world import detect_external_world
from .report.console import ConsolePresenter
from .result import FitResult
from .runner import run_training

GUARD_HELP = (
    "mptrain started worker processes with the 'spawn' start method, which re-imports your "
    "main script in every worker, and the script called mptrain again while being imported. "
    "Put the training call under  if __name__ == \"__main__\":  (see the Python "
    "multiprocessing docs, 'Safe importing of main module')")


def fit(model: nn.Module, train_data, test_data=None, *, out: str | Path | None = None,
        quiet: bool = True, resume: str | Path | Checkpoint | None = None,
        model_name: str | None = None, source: dict | None = None,
        presenter: ConsolePresenter | None = None, **settings) -> FitResult:
    """Train ``model`` on ``train_data`` and return a :class:`FitResult`.

    ``train_data``/``test_data`` are map-style datasets of ``(input, target)`` pairs (or a
    :class:`~mptrain.data.sources.DataBundle`); they are stacked into tensors and put in
    shared memory once. Integer targets train a classifier, float targets a regressor.
    ``settings`` are those of :class:`~mptrain.config.TrainConfig` (``strategy``,
    ``workers``, ``epochs``, ``lr``, ..., for fedavg ``rounds``, ``clients``,
    ``clients_per_round``, ``partition``, ...); what is not given comes from the checkpoint
    when resuming, else from the data set's defaults. ``resume`` is the --out folder of an
    earlier run with ``checkpoint_every`` (or a loaded checkpoint).
    ``model_name`` and ``source`` (how to rebuild the data and model: ``data``,
    ``data_dir``, ``model``) are recorded in checkpoints so that ``mptrain run --resume``
    can rebuild the run; the CLI passes them.
    """
    refuse_inside_spawned_import()
    if not isinstance(model, nn.Module):
        raise UserError(f"fit() needs a torch.nn.Module, got {type(model).__name__}")
    checkpoint, out = resolve_resume(resume, out)
    given = {k: v for k, v in settings.items() if v is not None}
    refuse_process_settings_under_launcher(given)
    if checkpoint is not None:
        given = {**applicable_settings(checkpoint.config), **given}
    given["quiet"] = quiet
    check_settings(given)

    bundle = train_data if isinstance(train_data, DataBundle) else \
        bundle_from_datasets(train_data, test_data)
    config = TrainConfig.from_settings(given, bundle.defaults)
    return train_bundle(config, bundle, model, model_name or type(model).__name__, out=out,
                        presenter=presenter, resume=checkpoint, run_info=source)


def check_settings(given: dict) -> None:
    """Refuse bad settings before any data is built (the data set's defaults cannot make a
    bad setting good)."""
    config = TrainConfig.from_settings(given)
    if config.strategy == "fedavg":
        from .data.partitions import parse_partition

        parse_partition(config.partition)


def train_bundle(config: TrainConfig, bundle: DataBundle, model: nn.Module, model_name: str,
                 out: str | Path | None = None, presenter: ConsolePresenter | None = None,
                 resume: Checkpoint | None = None, run_info: dict | None = None) -> FitResult:
    if config.checkpoint_every and out is None:
        raise UserError("--checkpoint-every needs --out DIR, the folder the checkpoint "
                        "is written to")
    if not config.strategy == "single" and detect_external_world() is None:
        threads = threads_per_worker(config.workers, config.threads_per_worker)
        method, _ = choose_start_method(config.start_method, config.device, threads)
        if method != "fork":
            check_spawn_ready(model)
    return run_training(config, bundle, model, model_name, presenter=presenter,
                        out=out, resume=resume, run_info=run_info)


def refuse_process_settings_under_launcher(given: dict) -> None:
    """Under torchrun the launcher owns the processes; mptrain's own process settings would
    be ignored, so they are refused instead."""
    world = detect_external_world()
    if world is None:
        return
    owned = {"workers": "--nproc-per-node (and --nnodes) of torchrun",
             "start_method": "nothing: torchrun starts the processes",
             "sharing_strategy": "nothing: the ranks of a node map the same files in "
                                 "/dev/shm",
             "max_restarts": "--max-restarts of torchrun; mptrain then resumes from the "
                             "last checkpoint in --out by itself"}
    for name, instead in owned.items():
        if name in given:
            raise UserError(f"--{name.replace('_', '-')} does nothing under {world.launcher}, "
                            f"which starts the processes itself; use {instead}")


def bundle_from_datasets(train_data, test_data) -> DataBundle:
    train = materialize(train_data, "training data")
    test = materialize(test_data, "test data") if test_data is not None else None
    task, output_size = infer_task(train.targets)
    return DataBundle(name=type(train_data).__name__, train=train, test=test, task=task,
                      output_size=output_size, default_model="(given)",
                      defaults=TrainingDefaults())


def refuse_inside_spawned_import() -> None:
    # True while a spawn'd child re-imports the parent's main script (CPython's own test).
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise RuntimeError(GUARD_HELP)


def check_spawn_ready(model: nn.Module) -> None:
    """Spawn pickles the model to every worker and re-imports ``__main__``; check both now."""
    try:
        pickle.dumps(type(model))
    except Exception:
        raise UserError(
            f"the model class {type(model).__qualname__} cannot be pickled by reference, "
            "which spawn'd workers need; define it in an importable module, not in a "
            "notebook cell or inside a function") from None
    for name, module in model.named_modules():
        for attr, value in vars(module).items():
            if attr.startswith("_") or isinstance(value, (nn.Module,)):
                continue
            try:
                pickle.dumps(value)
            except Exception as err:
                where = f"{name}.{attr}" if name else attr
                raise UserError(f"model attribute {where!r} ({type(value).__name__}) cannot "
                                f"be pickled for spawn'd workers: {err}") from None
    main = sys.modules.get("__main__")
    main_file = getattr(main, "__file__", None)
    if main_file and main_file.endswith(".py") and Path(main_file).is_file():
        source = Path(main_file).read_text(errors="replace")
        if "__name__" not in source:
            raise UserError(GUARD_HELP.replace(" and the script called mptrain again while "
                                               "being imported", ""))
