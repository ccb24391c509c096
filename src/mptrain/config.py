"""Run settings: one frozen, validated dataclass shared by the CLI, ``fit()`` and the workers.

Training knobs that depend on the data set (epochs, lr, ...) are ``None`` here until
:func:`resolve` fills them from the data set's recommended defaults, so that precedence is
always: data-set defaults < config file < command-line flags / ``fit()`` arguments.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from .errors import UserError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

STRATEGIES = ("single", "hogwild", "sync", "ddp", "fedavg", "dp")
AVAILABLE_STRATEGIES = ("single", "hogwild", "sync", "ddp")
OPTIMIZERS = ("sgd", "adam")
DDP_BACKENDS = ("auto", "shm", "gloo", "nccl")
DEVICES = ("cpu", "cuda")
SHARING_STRATEGIES = ("auto", "file_descriptor", "file_system")


@dataclass(frozen=True)
class TrainConfig:
    """Everything a run needs to know, after defaults are resolved."""

    strategy: str = "single"
    workers: int | None = None
    epochs: int | None = None
    batch_size: int | None = None
    lr: float | None = None
    momentum: float | None = None
    optimizer: str | None = None
    lr_decay: float | None = None
    lr_schedule: str | None = None
    weight_decay: float = 0.0
    seed: int = 0
    threads_per_worker: int | None = None
    sync_every: int | None = None
    share_optimizer_state: bool = False
    ddp_backend: str = "auto"
    device: str = "cpu"
    start_method: str | None = None
    worker_timeout: float = 300.0
    sharing_strategy: str = "auto"
    checkpoint_every: int | None = None
    steps_per_epoch: int | None = None   # cut epochs short: quick looks and benchmarks
    max_restarts: int = 0
    # Each worker's heap keeps its largest batch's activations (the allocator is tuned not
    # to give memory back): evaluating in training-sized batches adds nothing per worker.
    eval_batch_size: int = 64
    quiet: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if self.strategy not in STRATEGIES:
            raise UserError(
                f"unknown strategy {self.strategy!r}; choose one of: {', '.join(STRATEGIES)}"
            )
        if self.strategy not in AVAILABLE_STRATEGIES:
            raise UserError(
                f"strategy {self.strategy!r} is not available yet in this version of mptrain; "
                f"use one of: {', '.join(AVAILABLE_STRATEGIES)}"
            )
        for name in ("workers", "epochs", "batch_size", "threads_per_worker", "sync_every",
                     "eval_batch_size", "checkpoint_every", "steps_per_epoch"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                      or value < 1):
                raise UserError(f"--{_flag(name)} must be a positive integer, got {value!r}")
        if self.lr is not None and not (_is_number(self.lr) and self.lr > 0):
            raise UserError(f"--lr must be a positive number, got {self.lr!r}")
        if self.momentum is not None and not (_is_number(self.momentum)
                                              and 0 <= self.momentum < 1):
            raise UserError(f"--momentum must be in [0, 1), got {self.momentum!r}")
        if self.lr_decay is not None and not (_is_number(self.lr_decay)
                                              and 0 < self.lr_decay <= 1):
            raise UserError(f"--lr-decay must be in (0, 1], got {self.lr_decay!r}")
        if self.lr_schedule is not None and self.lr_schedule not in ("step", "cosine"):
            raise UserError(f"unknown --lr-schedule {self.lr_schedule!r}; choose step or cosine")
        if not (_is_number(self.weight_decay) and self.weight_decay >= 0):
            raise UserError(f"--weight-decay must be >= 0, got {self.weight_decay!r}")
        if self.optimizer is not None and self.optimizer not in OPTIMIZERS:
            raise UserError(
                f"unknown optimizer {self.optimizer!r}; choose one of: {', '.join(OPTIMIZERS)}"
            )
        if self.ddp_backend not in DDP_BACKENDS:
            raise UserError(f"unknown --ddp-backend {self.ddp_backend!r}; choose one of: "
                            f"{', '.join(DDP_BACKENDS)}")
        if self.device not in DEVICES:
            raise UserError(f"unknown --device {self.device!r}; choose one of: "
                            f"{', '.join(DEVICES)}")
        if self.start_method not in (None, "fork", "spawn", "forkserver"):
            raise UserError(f"unknown --start-method {self.start_method!r}; "
                            "choose fork, spawn or forkserver")
        if not isinstance(self.max_restarts, int) or self.max_restarts < 0:
            raise UserError(f"--max-restarts must be a non-negative integer, "
                            f"got {self.max_restarts!r}")
        if self.sharing_strategy not in SHARING_STRATEGIES:
            raise UserError(f"unknown --sharing-strategy {self.sharing_strategy!r}; choose "
                            f"one of: {', '.join(SHARING_STRATEGIES)}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise UserError(f"--seed must be a non-negative integer, got {self.seed!r}")
        if not (_is_number(self.worker_timeout) and self.worker_timeout > 0):
            raise UserError(f"--worker-timeout must be a positive number of seconds, "
                            f"got {self.worker_timeout!r}")
        if self.strategy == "single" and self.workers not in (None, 1):
            raise UserError(f"strategy 'single' runs one process but --workers is "
                            f"{self.workers}; use --strategy hogwild|sync|ddp for more workers")

    def replace(self, **changes) -> "TrainConfig":
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict:
        data = dataclasses.asdict(self)
        data["extra"] = dict(self.extra)
        return data


@dataclass(frozen=True)
class TrainingDefaults:
    """What a data set recommends when the user does not say (see ``data.sources``)."""

    epochs: int = 10
    batch_size: int = 64
    lr: float = 0.01
    momentum: float = 0.0
    optimizer: str = "sgd"
    lr_decay: float = 1.0  # learning rate multiplied by this after every epoch
    lr_schedule: str = "step"
    sync_every: int | None = None  # None: once per epoch


def resolve(config: TrainConfig, defaults: TrainingDefaults) -> TrainConfig:
    """Fill every unset data-dependent knob from the data set's recommendation."""
    changes = {}
    for name in ("epochs", "batch_size", "lr", "momentum", "optimizer", "lr_decay",
                 "lr_schedule"):
        if getattr(config, name) is None:
            changes[name] = getattr(defaults, name)
    if config.sync_every is None and defaults.sync_every is not None:
        changes["sync_every"] = defaults.sync_every
    if config.workers is None:
        changes["workers"] = 1 if config.strategy == "single" else 2
    return config.replace(**changes)


CONFIG_FILE_KEYS = frozenset(f.name for f in dataclasses.fields(TrainConfig)) - {"extra"} | {
    "data", "model", "data_dir", "out"}


def load_config_file(path: str | Path) -> dict:
    """Read a TOML config file whose keys are the long flag names (``-`` or ``_``).

    Keys may sit at the top level or under a ``[run]`` table. Unknown keys are an error,
    because a silently ignored typo (``epoch = 3``) is worse than a refusal.
    """
    path = Path(path)
    try:
        with path.open("rb") as handle:
            raw = tomllib.load(handle)
    except FileNotFoundError:
        raise UserError(f"config file {path} does not exist; check the --config path") from None
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"cannot read config file {path}: {err}") from None
    except tomllib.TOMLDecodeError as err:
        raise UserError(f"config file {path} is not valid TOML: {err}") from None
    if isinstance(raw.get("run"), dict):
        raw = {**{k: v for k, v in raw.items() if k != "run"}, **raw["run"]}
    values = {}
    for key, value in raw.items():
        name = key.replace("-", "_")
        if name not in CONFIG_FILE_KEYS:
            known = ", ".join(sorted(k.replace("_", "-") for k in CONFIG_FILE_KEYS))
            raise UserError(f"config file {path}: unknown key {key!r}; known keys: {known}")
        values[name] = value
    return values


def _flag(name: str) -> str:
    return name.replace("_", "-")


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
