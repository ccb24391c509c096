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

from .data.defaults import TrainingDefaults
from .engine.precision import PRECISIONS
from .errors import UserError, did_you_mean, setting_name
from .federated.choices import (ACCOUNTANTS, CLIENT_SAMPLING, SERVER_OPTIMIZERS, STRAGGLER_MODES,
                                VECTORIZE_CLIENTS)
from .strategies.fedavg.settings import FEDAVG_SETTINGS, FedAvgSettings
from .strategies.registry import DEFAULT_STRATEGY

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

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

PARTITION_HELP = (
    "How samples are split among clients: 'natural' (one client per id the data carries: "
    "LEAF's users, a Hub set's client column, FedProx's devices; the default for such data); "
    "'iid' (random, equal sizes); 'dirichlet:ALPHA' "
    "(label skew: each class spread over clients by Dirichlet(ALPHA) proportions, smaller "
    "ALPHA = more skew, e.g. 0.5; 'dirichlet:ALPHA:MIN' sets the smallest client size); "
    "'shards:K' (sort by label, deal K shards per client: at most ~K labels each); "
    "'pathological:K' (K classes per client); 'inner-dirichlet:ALPHA' (equal sizes, each "
    "client's label mix from Dirichlet(ALPHA)); 'linear', 'square', 'exponential' (client i's "
    "size grows as i, i^2, e^i; ':MIN' gives each client at least MIN); or "
    "'package.module:function' / 'path/to/file.py:function' called as "
    "function(targets, clients, seed) and returning one index list per client.")

#: Upper bounds where a larger value would not be refused by anything else but crash deep
#: inside (torch's thread pool, timer arithmetic, seeding).
MAX_THREADS_PER_WORKER = 1024
MAX_WORKER_TIMEOUT_S = 1e6      # about 11 days: more overflows timeouts in the libraries
MAX_SEED = 2**63 - 1


@dataclass(frozen=True, init=False)   # its own __init__ files the flat names into sections
class TrainConfig:
    """Everything a run needs to know, complete and validated."""

    strategy: str = DEFAULT_STRATEGY
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
    precision: str = "32"                   # or "bf16": forward passes under autocast
    compile: bool = False                   # each worker's model under torch.compile
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
    overwrite: bool = False                 # replace another run's outputs in --out
    #: Each training batch, in the worker: built-in image augmentation (``data.augment``)
    #: and a function of the user's (``data.batch_transform``).
    augment: str | None = None
    transform: str | None = None
    data_dtype: str = "auto"                # images in shared memory: uint8 where so given
    collate: str | None = None              # samples of different lengths: pad, or a function
    #: How workers read the data: stacked in shared memory once, or each its shard read
    #: where it lies by loader threads (``data.stream``); auto: stacked where that fits.
    loader: str = "auto"
    loader_workers: int = 1                 # loader threads per worker (stream; 0: inline)
    drop_last: bool = False                 # sync, ddp: cut each epoch's tail, never pad
    #: fedavg's own section (``strategies.fedavg.settings``); its settings are given by
    #: their flat names like every other (``TrainConfig(rounds=5)``, ``--rounds 5``).
    fedavg: FedAvgSettings = dataclasses.field(default_factory=FedAvgSettings)

    def __init__(self, *, fedavg: FedAvgSettings | None = None, **settings):
        """Every setting by its flat name -- the flag's, the config file's, ``fit()``'s --
        fedavg's too: those are filed into the ``fedavg`` section. A whole section may be
        given as ``fedavg`` (``dataclasses.replace`` passes it); flat names given beside it
        change it."""
        section = {k: settings.pop(k) for k in FEDAVG_SETTINGS if k in settings}
        for f in dataclasses.fields(self):
            if f.name != "fedavg":
                object.__setattr__(self, f.name, settings.pop(f.name, f.default))
        if settings:
            raise TypeError(f"TrainConfig got unknown setting(s) {', '.join(sorted(settings))}")
        if section.get("server_betas") is not None:
            section["server_betas"] = parse_betas(section["server_betas"])
        object.__setattr__(self, "fedavg",
                           dataclasses.replace(fedavg or FedAvgSettings(), **section))
        self.__post_init__()

    def __post_init__(self):
        for name in SETTING_NAMES:
            check_setting(name, self.setting(name))
        if self.ddp_backend == "nccl" and self.device != "cuda":
            backend = setting_name("ddp_backend")
            raise UserError(f"{backend} nccl needs {setting_name('device')} cuda; on CPU use "
                            f"{backend} auto (shared memory) or gloo")
        if self.loader == "stacked" and self.loader_workers != SETTING_DEFAULTS["loader_workers"]:
            # auto may stream, so its threads are told; stacked never reads through them.
            raise UserError(f"{setting_name('loader_workers')} sets the stream loader's "
                            f"threads, and {setting_name('loader')} stacked has none (the data "
                            f"is in shared memory); drop one of them")
        self.strategy_class.check_config(self)

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any],
                      defaults: TrainingDefaults | None = None) -> "TrainConfig":
        """The complete config: ``settings`` (what the user said, ``None`` = not said) over
        the data set's ``defaults`` for the chosen strategy.

        Settings that the chosen strategy would ignore are refused, naming what to use.
        """
        given = check_given(settings)
        strategy = strategy_class(given.get("strategy", DEFAULT_STRATEGY))
        values = strategy.recommended(defaults or TrainingDefaults())
        values = {k: v for k, v in values.items() if k in SETTING_NAMES}
        values["workers"] = strategy.default_worker_count()
        if "client_fraction" in given:
            values.pop("clients_per_round", None)  # the user chose the other way to say it
        values.update(given)
        if values.get("sync_every") == ONCE_PER_EPOCH:
            values["sync_every"] = None
        return cls(**values)

    @property
    def strategy_class(self):
        return strategy_class(self.strategy)

    def setting(self, name: str):
        """The value of setting ``name`` (its flat name), wherever its section keeps it."""
        return getattr(self.fedavg if name in FEDAVG_SETTINGS else self, name)

    @property
    def units(self) -> int:
        """Units of work in the run: epochs, or rounds for fedavg."""
        return self.strategy_class.units(self)

    @property
    def unit(self) -> str:
        return self.strategy_class.unit

    def replace(self, **changes) -> "TrainConfig":
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict:
        """Every setting by its flat name, in one flat dict: what checkpoints, summary.json
        and the trackers hold (the same keys as before fedavg had a section of its own, so
        old checkpoints resume)."""
        return {name: self.setting(name) for name in SETTING_NAMES}


#: Every setting's flat name (the sections' too), in the order of the flags' help.
SETTING_NAMES = tuple(f.name for f in dataclasses.fields(TrainConfig)
                      if f.name != "fedavg") + FEDAVG_SETTINGS
#: Every setting's value when not said (before a data set's or a strategy's defaults).
SETTING_DEFAULTS = {**{f.name: f.default for f in dataclasses.fields(TrainConfig)
                       if f.name != "fedavg"},
                    **{f.name: f.default for f in dataclasses.fields(FedAvgSettings)}}


def strategy_class(name: str):
    """The strategy class called ``name`` (a ``UserError`` naming the choices otherwise).

    Imported here, not at the top: the strategies' modules use the config's types, and the
    settings a strategy accepts are the strategy's own facts."""
    from .strategies import registry

    if name not in registry.STRATEGIES:
        raise UserError(f"unknown {setting_name('strategy')} {name!r}"
                        f"{did_you_mean(name, registry.STRATEGIES)}; choose one of: "
                        f"{', '.join(registry.STRATEGIES)}")
    return registry.strategy_class(name)


def check_given(settings: Mapping[str, Any]) -> dict:
    """What the user said (``None`` = not said) as a whole: no unknown name, a known
    strategy, and nothing the chosen strategy would ignore. Each value on its own is checked
    as its layer enters (``mptrain.settings``) and by the config itself; this is the check
    of the layers together. Returns the said settings."""
    from .strategies.registry import restricted_settings

    given = {k: v for k, v in settings.items() if v is not None}
    refuse_unknown(given, SETTING_NAMES)
    check_setting("strategy", given.get("strategy", DEFAULT_STRATEGY))
    strategy = strategy_class(given.get("strategy", DEFAULT_STRATEGY))
    for name, users in restricted_settings().items():
        if name in given and name not in strategy.settings \
                and given[name] != SETTING_DEFAULTS.get(name):
            instead = strategy.instead.get(name, "{strategy} " + " or ".join(users))
            raise UserError(f"{setting_name(name)} does nothing with "
                            f"{setting_name('strategy')} {strategy.name}; use "
                            f"{in_callers_words(instead)}")
    if isinstance(given.get("sync_every"), str):
        _check_steps_or_epoch(given["sync_every"])
    return given


def in_callers_words(text: str) -> str:
    """``text`` with each ``{setting}`` in it named as the caller spells it: a strategy's
    ``instead`` advice (``"{rounds} with fewer {clients_per_round}"``) is written once for
    the command line and for ``fit()``."""
    class Spelled(dict):
        def __missing__(self, name):
            return setting_name(name)

    return text.format_map(Spelled())


def refuse_unknown(said: Mapping[str, Any], known, what: str = "setting") -> None:
    """Refuse names outside ``known`` in one line that suggests the close one and lists
    them all (a silently ignored typo is worse than a refusal)."""
    unknown = sorted(set(said) - set(known))
    if not unknown:
        return
    hint = did_you_mean(unknown[0], known, spell=setting_name)
    names = ", ".join(setting_name(k) for k in unknown)
    raise UserError(f"unknown {what}{'s' if len(unknown) > 1 else ''} {names}{hint}; known: "
                    f"{', '.join(sorted(setting_name(k) for k in known))}")


def _check_steps_or_epoch(value: str) -> None:
    if value != ONCE_PER_EPOCH:
        raise UserError(f"{setting_name('sync_every')} takes a number of steps or "
                        f"'{ONCE_PER_EPOCH}', got {value!r}")


def applicable_settings(config: Mapping[str, Any]) -> dict:
    """The settings of a complete config (a checkpoint's) that its strategy uses: what a
    resumed run takes over without tripping the refusal of settings that do nothing."""
    from .strategies.registry import restricted_settings

    strategy = strategy_class(config.get("strategy", DEFAULT_STRATEGY))
    restricted = restricted_settings()
    settings = {k: v for k, v in config.items()
                if k in SETTING_NAMES and k not in PER_INVOCATION and v is not None
                and (k not in restricted or k in strategy.settings)}
    if "sync_every" in strategy.settings and config.get("sync_every", 0) is None:
        settings["sync_every"] = ONCE_PER_EPOCH  # said, not left to the data set's default
    # What a run could store before the config refused it, and which did nothing there:
    # left behind, the resume would be refused with advice to unsay what the user never said.
    if settings.get("loader") == "stacked":   # no loader threads
        settings.pop("loader_workers", None)
    if settings.get("share_optimizer_state"):
        from .engine.optim import state_like_params

        if not state_like_params(settings.get("optimizer", "sgd"),
                                 settings.get("momentum", 0.0)):   # plain SGD: no state
            settings.pop("share_optimizer_state")
    return settings


#: Settings of one invocation, not of the run: a resume does not take them from its
#: checkpoint (a run that replaced another's outputs does not make its resume replace any).
PER_INVOCATION = frozenset({"quiet", "overwrite"})


def replaced_on_resume(said: Mapping[str, Any]) -> frozenset:
    """The checkpoint's settings that ``said`` (the resumed run's own) replace: alternatives
    the config refuses together, which the user has no way to unsay. A stored cohort size
    stays when stacking is said again (a resumed run trains its checkpoint's cohorts)."""
    replaced = set()
    if "clients_per_round" in said:
        replaced.add("client_fraction")
    if "client_fraction" in said:
        replaced.add("clients_per_round")
    if said.get("vectorize_clients") == "off":
        replaced.add("vectorize_chunk")
    if said.get("loader") == "stacked":   # which has no loader threads
        replaced.add("loader_workers")
    if said.get("server_optimizer") == "sgd":     # the adaptive optimizers' own settings
        replaced.update(("server_betas", "server_tau"))
    elif said.get("server_optimizer") is not None:   # adam, yogi, adagrad: sgd's momentum
        replaced.add("server_momentum")
    return frozenset(replaced)


#: Config-file keys that say where the data, model and outputs are, not how to train.
_LOCATION_KEYS = frozenset({"data", "model", "data_dir", "out"}) | \
    frozenset({"client_column", "features", "label"})   # --data hf:NAME's columns
#: Config-file keys that say who is told about the run (``mptrain.trackers``): not settings
#: either, so a resumed run may log elsewhere.
_TRACKING_KEYS = frozenset({"logger", "tb_dir"})
CONFIG_FILE_KEYS = frozenset(SETTING_NAMES) | _LOCATION_KEYS | _TRACKING_KEYS
#: Keys whose value is a name or a path (``mptrain rl``'s env and net among them): a string,
#: and never an empty one, which would read as left out.
_NAME_OR_PATH_KEYS = _LOCATION_KEYS | {"tb_dir", "env", "net"}


class FileValues(dict):
    """A config file's values by setting name, with the file's ``path`` and each key as it
    was ``written`` (``batch-size`` or ``batch_size``), so that messages quote the file."""

    def __init__(self, values, path: Path, written: dict):
        super().__init__(values)
        self.path, self.written = path, written


#: The tables of a config file, one per command that reads it (``mptrain run``, ``rl``).
COMMAND_TABLES = ("run", "rl")


def load_config_file(path: str | Path, keys=None, tables=("run",)) -> FileValues:
    """Read a TOML config file whose keys are the long flag names (``-`` or ``_``) of the
    command it configures (``keys``: by default ``mptrain run``'s).

    Keys may sit at the top level or under the command's table: the first of ``tables``
    that the file has (``[run]``; ``mptrain rl``: ``[rl]``, else ``[run]``, which it read
    before ``[rl]`` existed). The other commands' tables (:data:`COMMAND_TABLES`) are left
    to them, so one file can configure both commands. Unknown keys are an error,
    because a silently ignored typo (``epoch = 3``) is worse than a refusal. The values are
    checked where the settings are resolved (``mptrain.settings``), named as written here.
    """
    path = Path(path)
    keys = CONFIG_FILE_KEYS if keys is None else frozenset(keys)
    try:
        with path.open("rb") as handle:
            raw = tomllib.load(handle)
    except FileNotFoundError:
        raise UserError(f"config file {path} does not exist; check the --config path") from None
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"cannot read config file {path}: {err}") from None
    except tomllib.TOMLDecodeError as err:
        raise UserError(f"config file {path} is not valid TOML: {err}") from None
    mine = next((table for table in tables if isinstance(raw.get(table), dict)), None)
    raw = {**{k: v for k, v in raw.items()
              if not (k in COMMAND_TABLES and isinstance(v, dict))},
           **(raw[mine] if mine is not None else {})}
    values, written = {}, {}
    for key, value in raw.items():
        name = key.replace("-", "_")
        if name not in keys:
            known = sorted(k.replace("_", "-") for k in keys)
            hint = did_you_mean(key.replace("_", "-"), known, spell=repr)
            raise UserError(f"config file {path}: unknown key {key!r}{hint}; known keys: "
                            f"{', '.join(known)}")
        if name in _NAME_OR_PATH_KEYS and not isinstance(value, str):
            raise UserError(f"config file {path}: {key} must be a string (a name or a "
                            f"path), got {value!r}")
        if name in _NAME_OR_PATH_KEYS and not value.strip():
            # Read as left out, an empty one would mean the built-in data, or the outputs
            # in the working folder.
            raise UserError(f"config file {path}: {key} is empty; give a value or leave "
                            f"{key} out")
        if name == "logger":
            from .trackers import parse_loggers

            try:
                value = ",".join(parse_loggers(value))
            except UserError as err:
                raise UserError(f"config file {path}: {err}") from None
        values[name], written[name] = value, key
    return FileValues(values, path, written)


def flag_name(name: str) -> str:
    """The command-line flag of setting ``name`` (without the dashes)."""
    return name.replace("_", "-")


def check_positive_ints(settings, names) -> None:
    """Refuse the first of ``names`` that is set (not None) to anything but an int >= 1."""
    for name in names:
        value = getattr(settings, name)
        if value is not None:
            check_kind(name, value, "a whole number")
            if value < 1:
                raise UserError(f"{setting_name(name)} must be a positive integer, "
                                f"got {value!r}")


_POSITIVE_INTS = ("workers", "epochs", "batch_size", "sync_every", "eval_batch_size",
                  "checkpoint_every", "steps_per_epoch", "eval_every", "rounds", "clients",
                  "clients_per_round", "local_epochs", "client_eval_every", "vectorize_chunk",
                  "personal_head_epochs", "concurrency", "buffer_size")
_FLAGS = ("share_optimizer_state", "quiet", "overwrite", "accept_failures", "scaffold",
          "compile", "drop_stragglers", "eval_train", "drop_last")
_CHOICES = {"optimizer": OPTIMIZERS, "lr_schedule": LR_SCHEDULES, "ddp_backend": DDP_BACKENDS,
            "device": DEVICES, "precision": PRECISIONS, "start_method": START_METHODS,
            "sharing_strategy": SHARING_STRATEGIES, "server_optimizer": SERVER_OPTIMIZERS,
            "sampling": CLIENT_SAMPLING, "accountant": ACCOUNTANTS,
            "vectorize_clients": VECTORIZE_CLIENTS, "straggler_mode": STRAGGLER_MODES,
            "data_dtype": ("auto", "uint8", "float32"),
            "loader": ("stacked", "stream", "auto")}
#: Settings that may be None (left to the run or off).
_OPTIONAL = frozenset({"start_method", "client_fraction", "target_accuracy", "server_lr",
                       "server_tau", "dp_clip", "dp_noise", "dp_delta", "target_epsilon",
                       "accountant", "dp_clip_quantile", "dp_clip_lr", "dp_count_noise",
                       "attack", "client_speeds", "availability_trace", "round_deadline",
                       "personal_memory", "augment", "transform", "collate"})
#: name: (low, high, low_open, high_open) for numbers.
_NUMBERS = {"lr": (0, None, True, False), "momentum": (0, 1, False, True),
            "lr_decay": (0, 1, True, False), "weight_decay": (0, None, False, False),
            "worker_timeout": (0, MAX_WORKER_TIMEOUT_S, True, False),
            "prox_mu": (0, None, False, False), "server_lr": (0, None, True, False),
            "server_momentum": (0, 1, False, True), "client_fraction": (0, 1, True, False),
            "target_accuracy": (0, 1, True, False), "server_tau": (0, None, True, False),
            "dropout_rate": (0, 1, False, True), "straggler_rate": (0, 1, False, False),
            "dp_clip": (0, None, True, False), "dp_noise": (0, None, True, False),
            "dp_delta": (0, 1, True, True), "target_epsilon": (0, None, True, False),
            "dp_clip_quantile": (0, 1, True, True), "dp_clip_lr": (0, None, True, False),
            "dp_count_noise": (0, None, True, False), "malicious_fraction": (0, 1, False, True),
            "round_deadline": (0, None, True, False), "over_select": (1, None, False, False),
            "personal_memory": (0, None, False, False)}


def check_setting(name: str, value) -> None:
    """Refuse ``value`` for setting ``name`` in one line naming the setting as the caller
    wrote it (None: not said, accepted where the setting may be left to the run). A value
    of the wrong kind (the string "0.1" from a config file) is named as such first: its
    range would mislead."""
    said = setting_name(name)
    if name == "strategy":
        check_kind(name, value, "a name")
        strategy_class(value)
    elif name == "sync_every" and isinstance(value, str):
        _check_steps_or_epoch(value)
    elif name in _POSITIVE_INTS:
        check_positive_ints(_One(name, value), (name,))
    elif name == "threads_per_worker":
        if value is not None:
            check_kind(name, value, "a whole number")
            if not 1 <= value <= MAX_THREADS_PER_WORKER:
                raise UserError(f"{said} must be an integer from 1 to "
                                f"{MAX_THREADS_PER_WORKER}, got {value!r}")
    elif name in _FLAGS:
        check_kind(name, value, "true or false")
    elif name in _CHOICES:
        if value is not None or name not in _OPTIONAL:
            check_kind(name, value, "a name")
            check_choice(value, name, _CHOICES[name])
    elif name in _NUMBERS:
        if value is not None or name not in _OPTIONAL:
            low, high, low_open, high_open = _NUMBERS[name]
            check_number(value, name, low, high, low_open, high_open)
    elif name in ("max_restarts", "loader_workers") or \
            (name == "max_staleness" and value is not None):
        check_kind(name, value, "a whole number")
        if value < 0:
            raise UserError(f"{said} must be a non-negative integer, got {value!r}")
    elif name == "staleness_weight":
        if value is not None:
            from .federated.asynchronous.staleness import parse_staleness_weight

            parse_staleness_weight(value)
    elif name == "seed":
        check_kind(name, value, "a whole number")
        if not 0 <= value <= MAX_SEED:
            raise UserError(f"{said} must be an integer from 0 to 2**63-1, got {value!r}")
    elif name == "server_betas":
        if value is not None:
            parse_betas(value)
    elif name in ("aggregator", "attack"):
        if value is not None or name == "aggregator":
            if not isinstance(value, str):
                raise UserError(f"{said} must be a string such as "
                                f"{'krum:4' if name == 'aggregator' else 'gaussian:1'}, "
                                f"got {value!r}")
            from .federated.robust.spec import parse_aggregator, parse_attack

            (parse_aggregator if name == "aggregator" else parse_attack)(value)
    elif name in ("client_speeds", "availability_trace"):
        if value is not None:   # read with the clients' count (fedavg's refusals)
            check_kind(name, value, "a name")
    elif name == "personalize":
        if value is not None:
            from .federated.personal.spec import parse_personalize   # no torch

            parse_personalize(value)
    elif name == "augment":
        if value is not None:
            from .data.augment import parse_augment   # no torch

            parse_augment(value)
    elif name == "transform":
        if value is not None:
            from .data.batch_transform import check_transform_name

            check_transform_name(value)
    elif name == "collate":
        if value is not None:
            from .data.ragged import check_collate_name

            check_collate_name(value)
    elif name == "partition":
        check_kind(name, value, "a name")
        if not value:
            raise UserError(f"{said} must be a name such as iid, got {value!r}")
        from .data.partitions import parse_partition   # the data module reads this one

        parse_partition(value)


#: What each kind of value is, as a config file or a Python call may get it wrong.
_KINDS = {"a whole number": lambda v: _is_int(v),
          "a number": lambda v: _is_number(v) or (isinstance(v, float) and not isinstance(v, bool)),
          "true or false": lambda v: isinstance(v, bool),
          "a name": lambda v: isinstance(v, str)}


def check_kind(name: str, value, kind: str) -> None:
    """Refuse a value of the wrong kind, saying which kind it is and which was expected."""
    if _KINDS[kind](value):
        return
    if kind == "a whole number" and isinstance(value, float) and not isinstance(value, bool) \
            and value.is_integer():
        raise UserError(f"{setting_name(name)} must be a whole number, got {value!r}; write "
                        f"{int(value)}")
    raise UserError(f"{setting_name(name)} is {describe_kind(value)} ({value!r}) where "
                    f"{kind} is expected")


def describe_kind(value) -> str:
    """``a string``, ``true or false``, ``a list``...: what a value is, in a user's words."""
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, int):
        return "a whole number"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "a table"
    return f"a {type(value).__name__}"


def parse_betas(value) -> tuple[float, float]:
    """``--server-betas B1,B2`` (a string, or a pair in a config file or ``fit()``) as two
    numbers in [0, 1)."""
    parts = value.split(",") if isinstance(value, str) else value
    try:
        betas = tuple(float(p) if isinstance(p, str) else p for p in parts)
    except (TypeError, ValueError):
        betas = ()
    if len(betas) != 2 or not all(_is_number(b) and 0 <= b < 1 for b in betas):
        raise UserError(f"{setting_name('server_betas')} must be two numbers in [0, 1) such "
                        f"as 0.9,0.99, got {value!r}")
    return betas


class _One:
    """One setting as an attribute, for the checks that read settings objects."""

    def __init__(self, name, value):
        setattr(self, name, value)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)


def check_choice(value, name: str, choices) -> None:
    if value not in choices:
        raise UserError(f"unknown {setting_name(name)} {value!r}"
                        f"{did_you_mean(value, choices)}; choose one of: {', '.join(choices)}")


def check_number(value, name: str, low=None, high=None, low_open=False, high_open=False):
    check_kind(name, value, "a number")
    ok = _is_number(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if not ok:
        left = "(" if low_open else "["
        right = ")" if high_open else "]"
        if low is None and high is None:
            bound = "a finite number"
        elif high is None:
            bound = f"> {low}" if low_open else f">= {low}"
        else:
            bound = f"in {left}{low}, {high}{right}"
        raise UserError(f"{setting_name(name)} must be {bound}, got {value!r}")
