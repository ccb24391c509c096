"""``mptrain.fit``: the Python entry point; the CLI is a thin layer over the same path."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import torch.nn as nn

from .checkpoint import Checkpoint, check_folder_argument, resolve_resume, user_code_in
from .callbacks import EVENTS as CALLBACK_EVENTS
from .config import TrainConfig, TrainingDefaults
from .data.sources import (DataBundle, user_datasets, with_collate, with_data_dtype,
                           with_loader)
from .errors import UserError, as_keyword, python_caller, setting_name, spelled
from .launch.launchers import Launcher, choose_launcher
from .launch.preflight import GUARD_HELP
from .result import FitResult
from .runner import RunRequest, run
from .strategies import make_strategy
from .supervised import SupervisedFamily


def fit(model: nn.Module, train_data, test_data=None, *, out: str | Path | None = None,
        overwrite: bool = False, quiet: bool = True,
        resume: str | Path | Checkpoint | None = None, loggers=None,
        tb_dir: str | Path | None = None, callbacks=None,
        **settings) -> FitResult:
    """Train ``model`` on ``train_data`` and return a :class:`FitResult`.

    ``train_data``/``test_data`` are map-style datasets of ``(input, target)`` pairs (or a
    :class:`~mptrain.data.sources.DataBundle`); they are stacked into tensors and put in
    shared memory once, or with ``loader="stream"`` (and ``"auto"`` where stacking would
    not fit there) read where they lie by each worker's loader threads. Integer targets
    train a classifier, float targets a regressor.
    ``settings`` are those of :class:`~mptrain.config.TrainConfig` (``strategy``,
    ``workers``, ``epochs``, ``lr``, ..., for fedavg ``rounds``, ``clients``,
    ``clients_per_round``, ``partition``, ``server_optimizer``, ``scaffold``,
    ``dropout_rate``, ``dp_noise``, ``target_epsilon``, ``client_eval_every``, ...: the
    command line's names with underscores; an unknown one is refused, and refusals name
    them as written here; ``partition`` may also be a function ``(targets, clients, seed) ->
    one index list per client``, where the command line takes an import string;
    ``transform`` a function ``(inputs, targets, generator) -> (inputs, targets)`` applied to
    each training batch in the workers, ``augment`` built-in image augmentation such as
    ``"crop:4,hflip"``, ``collate`` ``"pad"`` or a function ``(sequences, targets) ->
    (inputs, targets)`` for samples of different lengths, ``data_dtype`` how images are
    held in shared memory: see docs/usage.md, "Data pipeline"); what is
    not given comes from the checkpoint when resuming,
    else from the data set's defaults. ``resume`` is the --out folder of an
    earlier run with ``checkpoint_every`` (or a loaded checkpoint). ``out`` holding
    another run's outputs is refused unless ``overwrite`` (or ``resume`` is that run).

    ``loggers``: experiment trackers that get every round live (``"tensorboard"``,
    ``"mlflow"``, ``"wandb"``, ``"csv"``, a list or comma-separated; see
    :mod:`mptrain.trackers`), ``tb_dir`` the TensorBoard folder (default ``out/tb``);
    ``callbacks``: :class:`~mptrain.callbacks.Callback` objects of yours.
    """
    refuse_inside_spawned_import()
    if not isinstance(model, nn.Module):
        raise UserError(f"fit() needs a torch.nn.Module, got {type(model).__name__}")
    if isinstance(train_data, DataBundle) and test_data is not None \
            and test_data is not train_data.test:   # the bundle's own, twice: no harm
        # It was ignored without a word: the run scored on the bundle's test set.
        raise UserError(f"fit() got a DataBundle, which carries its own test set "
                        f"({train_data.name}'s), and a test_data beside it; give one: the "
                        "bundle alone, or its .train and your test set")
    from .settings import keywords

    with spelled(as_keyword):   # what follows names settings as this call does
        checkpoint, out = resolve_resume(resume, out)
        given = {k: v for k, v in settings.items() if v is not None}
        if callable(given.get("partition")):   # a function of the caller's, not a name
            from .data.partitions import given_function

            given["partition"] = given_function(given["partition"])
        if callable(given.get("transform")):
            from .data.batch_transform import given_transform

            given["transform"] = given_transform(given["transform"])
        if callable(given.get("collate")):
            from .data.ragged import given_collate

            given["collate"] = given_collate(given["collate"])
        defaults = train_data.defaults if isinstance(train_data, DataBundle) \
            else TrainingDefaults()
        if checkpoint is not None:
            user_code_in(checkpoint, {k: given.get(k)
                                      for k in ("partition", "transform", "collate")})
        said = {**given, "quiet": quiet, "overwrite": overwrite}
        config = resolved_config([keywords(said, "fit()")], checkpoint,
                                 defaults, resume)
        launcher = launcher_for(config, given)
        telling = telling_whom(loggers, tb_dir, callbacks)
        bundle = with_collate(with_loader(with_data_dtype(
            train_data if isinstance(train_data, DataBundle) else
            bundle_from_datasets(train_data, test_data, config.seed, config.loader),
            config.data_dtype), config), config.collate)
        return train(config, bundle, model, type(model).__name__, launcher, out=out,
                     checkpoint=checkpoint, **telling)


def resolved_config(layers, checkpoint: Checkpoint | None, defaults: TrainingDefaults,
                    resume=None) -> TrainConfig:
    """The run's config: ``layers`` (``mptrain.settings``) over the checkpoint's settings
    over the data set's recipe ``defaults``, refused before any data is built."""
    from .settings import supervised_config
    from .strategies.registry import STRATEGIES

    if checkpoint is not None and checkpoint.strategy not in STRATEGIES:
        how = "mptrain.rl.fit(resume=...)" if python_caller() else "mptrain rl --resume"
        raise UserError(f"the checkpoint was written by an RL run (algo "
                        f"{checkpoint.strategy}), not a supervised one; resume it with {how}")
    return supervised_config(layers, checkpoint=checkpoint, defaults=defaults,
                             resume_from=str(resume) if isinstance(resume, (str, Path))
                             else None)


def telling_whom(loggers, tb_dir, callbacks) -> dict:
    """``loggers``, ``tb_dir`` and ``callbacks`` as a run request takes them, the tracker
    names checked (before any data is built)."""
    from .trackers import parse_loggers

    check_folder_argument("tb_dir", tb_dir)
    if callbacks is not None and not isinstance(callbacks, (list, tuple)):
        callbacks = [callbacks]
    callbacks = list(callbacks or [])
    for index, callback in enumerate(callbacks):
        check_callback(index, callback)
    return {"loggers": parse_loggers(loggers), "tb_dir": tb_dir, "callbacks": callbacks}


def check_callback(index: int, callback) -> None:
    """Refuse what cannot be a callback: it was called on no event (a function, a string:
    silence), or as a class without its instance (a TypeError at the first event)."""
    if isinstance(callback, type):
        raise UserError(f"callbacks[{index}] is the class {callback.__name__}; pass an "
                        f"instance: {callback.__name__}()")
    if not any(callable(getattr(callback, event, None)) for event in CALLBACK_EVENTS):
        raise UserError(f"callbacks[{index}] is a {type(callback).__name__} with none of a "
                        f"Callback's methods ({', '.join(CALLBACK_EVENTS)}); subclass "
                        "mptrain.callbacks.Callback and override those you need")


def launcher_for(config: TrainConfig, given: dict) -> Launcher:
    """The run's launcher, chosen once; it refuses the settings it owns (of those the user
    said, ``given``: a checkpoint's are the run's own)."""
    launcher = choose_launcher(config.strategy_class)
    launcher.refuse_settings(given)
    return launcher


def train(config: TrainConfig, bundle: DataBundle, model: nn.Module, model_name: str,
          launcher: Launcher, *, out: str | Path | None = None,
          checkpoint: Checkpoint | None = None, run_info: dict | None = None,
          loggers: tuple[str, ...] = (), tb_dir: str | Path | None = None,
          callbacks: list | None = None) -> FitResult:
    """Run ``config`` (resolved by ``mptrain.settings``); the CLI's way in too, with where
    the data and model came from (``run_info``) and who is told as it goes (``loggers``,
    ``tb_dir``, ``callbacks``)."""
    if config.checkpoint_every and out is None:
        raise UserError(f"{setting_name('checkpoint_every')} needs {setting_name('out')} "
                        "DIR, the folder the checkpoint is written to")
    family = SupervisedFamily(bundle, model_name, run_info=dict(run_info or {}))
    return run(RunRequest(config=config, strategy=make_strategy(config), launcher=launcher,
                          model=model, family=family, out=out, resume=checkpoint,
                          quiet=config.quiet, loggers=tuple(loggers), tb_dir=tb_dir,
                          callbacks=list(callbacks or [])))


def bundle_from_datasets(train_data, test_data, seed: int = 0,
                         loader: str = "stacked") -> DataBundle:
    """The user's data sets stacked under ``seed`` (``data.seeding``): a ``__getitem__``
    that draws random numbers gives the same data for the same seed; or read where they lie
    (``loader``: ``--loader``, ``data.stream``)."""
    from .data.seeding import seeded

    with seeded(seed):
        return user_datasets(type(train_data).__name__, train_data, test_data,
                             "(given)", TrainingDefaults(), loader)


def refuse_inside_spawned_import() -> None:
    # True while a spawn'd child re-imports the parent's main script (CPython's own test).
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise RuntimeError(GUARD_HELP)
