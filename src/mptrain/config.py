"""Run settings: one frozen, validated dataclass shared by the CLI, ``fit()`` and the workers.

A :class:`TrainConfig` is always complete: it is built by :meth:`TrainConfig.from_settings`
from what the user said (a plain dict: flags, config file, ``fit()`` keywords) over what the
data set recommends (:class:`TrainingDefaults`), so precedence is always
data-set defaults < checkpoint (when resuming) < config file < flags / ``fit()`` arguments.

The choice lists live here, once; the CLI, the bench and the strategies read them from here.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .errors import UserError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

STRATEGIES = ("single", "hogwild", "sync", "ddp", "fedavg")
OPTIMIZERS = ("sgd", "adam")
LR_SCHEDULES = ("step", "cosine")
DDP_BACKENDS = ("auto", "shm", "gloo", "nccl")
DEVICES = ("cpu", "cuda")
START_METHODS = ("fork", "spawn", "forkserver")
SHARING_STRATEGIES = ("auto", "file_descriptor", "file_system")
#: What ``--sync-every`` (or ``sync_every`` in a config file) says for "once per epoch": the
#: config holds None for it, but None in settings means "not said" -- and a data set may
#: recommend every step (MNIST's recipe does).
ONCE_PER_EPOCH = "epoch"

PARTITION_CHOICES = ("iid, dirichlet:ALPHA[:MIN], shards:K, or an import string "
                     "'package.module:function' / 'path/to/file.py:function'")

PARTITION_HELP = (
    "How samples are split among clients: 'iid' (random, equal sizes); 'dirichlet:ALPHA' "
    "(label skew: each class spread over clients by Dirichlet(ALPHA) proportions, smaller "
    "ALPHA = more skew, e.g. 0.5; 'dirichlet:ALPHA:MIN' sets the smallest client size); "
    "'shards:K' (sort by label, deal K shards per client: at most ~K labels each); or "
    "'package.module:function' / 'path/to/file.py:function' called as "
    "function(targets, clients, seed) and returning one index list per client.")

#: Settings that mean something for some strategies only; given for another, they are refused
#: rather than silently ignored.
ONLY_FOR = {
    "sync_every": ("sync",),
    "share_optimizer_state": ("hogwild",),
    "ddp_backend": ("ddp",),
    "max_restarts": ("hogwild", "sync", "ddp", "fedavg"),
    "steps_per_epoch": ("single", "hogwild", "sync", "ddp"),
    "epochs": ("single", "hogwild", "sync", "ddp"),
    "rounds": ("fedavg",),
    "clients": ("fedavg",),
    "clients_per_round": ("fedavg",),
    "client_fraction": ("fedavg",),
    "local_epochs": ("fedavg",),
    "partition": ("fedavg",),
    "prox_mu": ("fedavg",),
    "server_lr": ("fedavg",),
    "server_momentum": ("fedavg",),
    "accept_failures": ("fedavg",),
}
_INSTEAD = {"epochs": "--rounds", "rounds": "--epochs", "steps_per_epoch": "--rounds with "
            "fewer --clients-per-round", "max_restarts": "--strategy sync or ddp"}


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
    #: fedavg's own recipe (McMahan et al. 2017: plain client SGD, small batches); the
    #: epoch strategies' recipe (Adam halved every epoch) does not fit rounds.
    federated: Mapping[str, Any] = dataclasses.field(default_factory=lambda: {
        "rounds": 20, "clients": 100, "clients_per_round": 10, "batch_size": 32,
        "lr": 0.05, "momentum": 0.0, "optimizer": "sgd", "lr_decay": 1.0})

    def for_strategy(self, strategy: str) -> dict:
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                  if f.name != "federated"}
        if strategy == "fedavg":
            values.update(self.federated)
            values["sync_every"] = None
        elif strategy != "sync":
            values["sync_every"] = None
        return values


@dataclass(frozen=True)
class TrainConfig:
    """Everything a run needs to know, complete and validated."""

    strategy: str = "single"
    workers: int = 1
    epochs: int = 10
    batch_size: int = 64
    lr: float = 0.01
    momentum: float = 0.0
    optimizer: str = "sgd"
    lr_decay: float = 1.0
    lr_schedule: str = "step"
    weight_decay: float = 0.0
    seed: int = 0
    threads_per_worker: int | None = None   # None: usable cores // workers
    sync_every: int | None = None           # None: once per epoch
    share_optimizer_state: bool = False
    ddp_backend: str = "auto"
    device: str = "cpu"
    start_method: str | None = None         # None: chosen per run (launch.start_method)
    worker_timeout: float = 300.0
    sharing_strategy: str = "auto"
    checkpoint_every: int | None = None     # in epochs, or rounds for fedavg
    steps_per_epoch: int | None = None      # cut epochs short: quick looks and benchmarks
    max_restarts: int = 0
    eval_every: int = 1                     # evaluate every N epochs / rounds (and at the end)
    target_accuracy: float | None = None    # stop at the first evaluation that reaches it
    # Each worker's heap keeps its largest batch's activations (the allocator is tuned not
    # to give memory back): evaluating in training-sized batches adds nothing per worker.
    eval_batch_size: int = 64
    quiet: bool = False
    # -- fedavg ------------------------------------------------------------------------------
    rounds: int = 20
    clients: int = 100
    clients_per_round: int | None = None    # None: from client_fraction
    client_fraction: float | None = None    # None with clients_per_round None: 10 clients
    local_epochs: int = 1
    partition: str = "iid"
    prox_mu: float = 0.0
    server_lr: float = 1.0
    server_momentum: float = 0.0
    accept_failures: bool = False

    def __post_init__(self):
        if self.strategy not in STRATEGIES:
            raise UserError(f"unknown strategy {self.strategy!r}; choose one of: "
                            f"{', '.join(STRATEGIES)}")
        check_positive_ints(self, ("workers", "epochs", "batch_size", "threads_per_worker",
                                   "sync_every", "eval_batch_size", "checkpoint_every",
                                   "steps_per_epoch", "eval_every", "rounds", "clients",
                                   "clients_per_round", "local_epochs"))
        _check_number(self.lr, "lr", low=0, low_open=True)
        _check_number(self.momentum, "momentum", low=0, high=1, high_open=True)
        _check_number(self.lr_decay, "lr-decay", low=0, low_open=True, high=1)
        _check_number(self.weight_decay, "weight-decay", low=0)
        _check_number(self.worker_timeout, "worker-timeout", low=0, low_open=True)
        _check_number(self.prox_mu, "prox-mu", low=0)
        _check_number(self.server_lr, "server-lr", low=0, low_open=True)
        _check_number(self.server_momentum, "server-momentum", low=0, high=1, high_open=True)
        if self.client_fraction is not None:
            _check_number(self.client_fraction, "client-fraction", low=0, low_open=True, high=1)
        if self.target_accuracy is not None:
            _check_number(self.target_accuracy, "target-accuracy", low=0, low_open=True,
                          high=1)
        _check_choice(self.optimizer, "optimizer", OPTIMIZERS)
        _check_choice(self.lr_schedule, "lr-schedule", LR_SCHEDULES)
        _check_choice(self.ddp_backend, "ddp-backend", DDP_BACKENDS)
        _check_choice(self.device, "device", DEVICES)
        _check_choice(self.sharing_strategy, "sharing-strategy", SHARING_STRATEGIES)
        if self.start_method is not None:
            _check_choice(self.start_method, "start-method", START_METHODS)
        if not _is_int(self.max_restarts) or self.max_restarts < 0:
            raise UserError(f"--max-restarts must be a non-negative integer, "
                            f"got {self.max_restarts!r}")
        if not _is_int(self.seed) or self.seed < 0:
            raise UserError(f"--seed must be a non-negative integer, got {self.seed!r}")
        if not isinstance(self.partition, str) or not self.partition:
            raise UserError(f"--partition must be a name such as iid, got {self.partition!r}")
        if self.strategy == "single" and self.workers != 1:
            raise UserError(f"strategy 'single' runs one process but --workers is "
                            f"{self.workers}; use --strategy hogwild|sync|ddp for more workers")
        if self.ddp_backend == "nccl" and self.device != "cuda":
            raise UserError("--ddp-backend nccl needs --device cuda; on CPU use "
                            "--ddp-backend auto (shared memory) or gloo")
        if self.strategy == "fedavg":
            if self.clients_per_round is not None and self.client_fraction is not None:
                raise UserError("give --clients-per-round or --client-fraction, not both")
            if self.sampled_clients > self.clients:
                raise UserError(f"--clients-per-round {self.sampled_clients} is more than "
                                f"--clients {self.clients}; sample at most every client")

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any],
                      defaults: TrainingDefaults | None = None) -> "TrainConfig":
        """The complete config: ``settings`` (what the user said, ``None`` = not said) over
        the data set's ``defaults`` for the chosen strategy.

        Settings that the chosen strategy would ignore are refused, naming what to use.
        """
        given = {k: v for k, v in settings.items() if v is not None}
        unknown = sorted(set(given) - set(SETTING_NAMES))
        if unknown:
            raise UserError(f"unknown setting(s) {', '.join(unknown)}; known: "
                            f"{', '.join(sorted(SETTING_NAMES))}")
        strategy = given.get("strategy", "single")
        for name, strategies in ONLY_FOR.items():
            if name in given and strategy in STRATEGIES and strategy not in strategies \
                    and given[name] != getattr(cls, name, None):
                instead = _INSTEAD.get(name, "--strategy " + " or ".join(strategies))
                raise UserError(f"--{flag_name(name)} does nothing with --strategy {strategy}; "
                                f"use {instead}")
        values = (defaults or TrainingDefaults()).for_strategy(strategy)
        values = {k: v for k, v in values.items() if k in SETTING_NAMES}
        values["workers"] = 1 if strategy == "single" else 2
        if "client_fraction" in given:
            values.pop("clients_per_round", None)  # the user chose the other way to say it
        values.update(given)
        if values.get("sync_every") == ONCE_PER_EPOCH:
            values["sync_every"] = None
        elif isinstance(values.get("sync_every"), str):
            raise UserError(f"--sync-every takes a number of steps or '{ONCE_PER_EPOCH}', got "
                            f"{values['sync_every']!r}")
        return cls(**values)

    @property
    def sampled_clients(self) -> int:
        """Clients trained per fedavg round (at least one)."""
        if self.clients_per_round is not None:
            return self.clients_per_round
        if self.client_fraction is not None:
            return max(1, math.ceil(self.client_fraction * self.clients))
        return min(10, self.clients)

    @property
    def units(self) -> int:
        """Units of work in the run: epochs, or rounds for fedavg."""
        return self.rounds if self.strategy == "fedavg" else self.epochs

    @property
    def unit(self) -> str:
        return "round" if self.strategy == "fedavg" else "epoch"

    def replace(self, **changes) -> "TrainConfig":
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


SETTING_NAMES = tuple(f.name for f in dataclasses.fields(TrainConfig))


def applicable_settings(config: Mapping[str, Any]) -> dict:
    """The settings of a complete config (a checkpoint's) that its strategy uses: what a
    resumed run takes over without tripping the refusal of settings that do nothing."""
    strategy = config.get("strategy", "single")
    settings = {k: v for k, v in config.items()
                if k in SETTING_NAMES and k != "quiet" and v is not None
                and strategy in ONLY_FOR.get(k, (strategy,))}
    if strategy == "sync" and config.get("sync_every", 0) is None:
        settings["sync_every"] = ONCE_PER_EPOCH  # said, not left to the data set's default
    return settings
CONFIG_FILE_KEYS = frozenset(SETTING_NAMES) | {"data", "model", "data_dir", "out"}


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


def flag_name(name: str) -> str:
    """The command-line flag of setting ``name`` (without the dashes)."""
    return name.replace("_", "-")


def check_positive_ints(settings, names) -> None:
    """Refuse the first of ``names`` that is set (not None) to anything but an int >= 1."""
    for name in names:
        value = getattr(settings, name)
        if value is not None and not (_is_int(value) and value >= 1):
            raise UserError(f"--{flag_name(name)} must be a positive integer, got {value!r}")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)


def _check_choice(value, flag: str, choices) -> None:
    if value not in choices:
        raise UserError(f"unknown --{flag} {value!r}; choose one of: {', '.join(choices)}")


def _check_number(value, flag: str, low=None, high=None, low_open=False, high_open=False):
    ok = _is_number(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if not ok:
        left = "(" if low_open else "["
        right = ")" if high_open else "]"
        if high is None:
            bound = f"> {low}" if low_open else f">= {low}"
        else:
            bound = f"in {left}{low}, {high}{right}"
        raise UserError(f"--{flag} must be {bound}, got {value!r}")
