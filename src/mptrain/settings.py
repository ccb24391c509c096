"""One path from what the user said to a run's complete settings, for both families of runs
(supervised: ``mptrain run``, ``mptrain.fit``; RL: ``mptrain rl``, ``mptrain.rl.fit``).

The layers, lowest first: the family's defaults < the data set's recipe (supervised runs) <
the checkpoint's settings (when resuming) < a config file < flags or keyword arguments. Each
layer is checked once as it enters, its values named as that layer spells them (``--lr`` on
the command line, ``lr`` from Python, the key as written in the file); the layers together
are then checked by building the frozen config, which refuses combinations. Everything here
runs before any data is built or any process starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from .errors import UserError, as_keyword, setting_name, spelled


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


@dataclass(frozen=True)
class Layer:
    """One source of settings: its values (``None``: not said), how it spells their names
    and how its messages begin (``config file run.toml: ``)."""

    values: Mapping[str, Any]
    spelling: Callable[[str], str] = _flag
    prefix: str = ""


def flags(values: Mapping[str, Any]) -> Layer:
    """The command line's flags."""
    return Layer(values)


def keywords(values: Mapping[str, Any], call: str) -> Layer:
    """A Python call's keyword arguments (``call``: ``fit()``, ``rl.fit()``)."""
    return Layer(values, as_keyword, f"{call}: ")


def config_file(values, leave_out=frozenset()) -> Layer:
    """A config file's settings (``config.load_config_file``), named by their keys;
    ``leave_out``: its keys that are not settings (where the outputs go, trackers)."""
    written = getattr(values, "written", {})
    path = getattr(values, "path", None)
    return Layer({k: v for k, v in values.items() if k not in leave_out},
                 lambda name: written.get(name, name.replace("_", "-")),
                 f"config file {path}: " if path is not None else "config file: ")


@dataclass(frozen=True)
class Family:
    """What differs between supervised and RL settings: the names a family knows, how one
    value is checked, what a checkpoint hands on, how the complete config is built, and
    which setting asks for more work when a resume has none left."""

    strategy_key: str                     # strategy, algo
    known: Callable[[], frozenset]
    check: Callable[[str, Any], None]
    resumable: Callable[[dict], dict]     # a checkpoint's config -> the settings it hands on
    build: Callable[[dict, Any], Any]     # said settings, data-set recipe -> frozen config
    more_work: Callable[[Any, int], tuple[str, int]]  # config, units done -> setting, minimum
    #: said settings -> the checkpoint's settings they replace (alternatives to them, which
    #: the user could not otherwise take back: there is no flag that unsays a setting)
    replaced: Callable[[dict], frozenset] = lambda said: frozenset()
    #: saved settings (a checkpoint's config), the resumed run's config, where it resumes
    #: from -> refuse a resume whose state the checkpoint does not hold (--personalize)
    refuse_other_state: Callable[[dict, Any, str | None], None] = \
        lambda saved, config, where: None


def resolve(family: Family, layers: list[Layer], *, checkpoint=None, defaults=None,
            resume_from: str | None = None):
    """The run's complete, frozen config: ``layers`` (lowest first: config file, then flags
    or keywords) over the checkpoint's settings over ``defaults`` (the data set's recipe).

    A resume that names another strategy than the checkpoint's, that asks for state the
    checkpoint does not hold (another --personalize), or that leaves no work to do, is
    refused here: before anything is built or rewritten."""
    said: dict = {}
    for layer in layers:
        said.update(_checked(family, layer))
    spelling = layers[-1].spelling if layers else _flag
    with spelled(spelling):
        if checkpoint is not None:
            _refuse_other_strategy(family, said, checkpoint, resume_from)
        config = family.build({**_handed_on(family, checkpoint, said), **said}, defaults)
        if checkpoint is not None:
            family.refuse_other_state(checkpoint.config, config, resume_from)
            _refuse_finished(family, config, checkpoint, resume_from, said)
    return config


def _handed_on(family: Family, checkpoint, said: dict) -> dict:
    """The checkpoint's settings that the resumed run takes over: all it used but those the
    user's own settings replace (``--client-fraction`` replaces a stored
    ``--clients-per-round``; both together would be refused, and the stored one cannot be
    unsaid)."""
    if checkpoint is None:
        return {}
    replaced = family.replaced(said)
    return {k: v for k, v in family.resumable(checkpoint.config).items() if k not in replaced}


def _checked(family: Family, layer: Layer) -> dict:
    """The said values of ``layer``, unknown names and bad values refused in its words."""
    values = {k: v for k, v in layer.values.items() if v is not None}
    with spelled(layer.spelling):
        try:
            from .config import refuse_unknown

            refuse_unknown(values, family.known())
            for name, value in values.items():
                family.check(name, value)
        except UserError as err:
            raise UserError(f"{layer.prefix}{err}") from None
    return values


def _refuse_other_strategy(family: Family, said: dict, checkpoint, resume_from) -> None:
    """A checkpoint holds one strategy's per-rank state: resuming it under another would
    start that strategy from state it cannot read."""
    chosen = said.get(family.strategy_key)
    if chosen is not None and chosen != checkpoint.strategy:
        where = f" in {resume_from}" if resume_from else ""
        key = setting_name(family.strategy_key)
        raise UserError(f"the checkpoint{where} was written by {key} {checkpoint.strategy}, "
                        f"not {chosen}: its state is {checkpoint.strategy}'s; resume with "
                        f"{key} {checkpoint.strategy} (or leave {key} out), or train with "
                        f"{chosen} in a new run (no {setting_name('resume')})")


def _refuse_finished(family: Family, config, checkpoint, resume_from, said: dict) -> None:
    """A resume with no work left would run nothing and rewrite the outputs."""
    if config.units > checkpoint.epoch:
        return
    name, minimum = family.more_work(config, checkpoint.epoch)
    where = f"the run in {resume_from}" if resume_from else "the checkpoint's run"
    # A supervised config keeps fedavg's settings in a section of their own.
    value = config.setting(name) if hasattr(config, "setting") else getattr(config, name)
    asked = f"{setting_name(name)} {value} asks for no more" if name in said \
        else f"its own {setting_name(name)} {value} is done"
    raise UserError(f"{where} is already at {config.unit} {checkpoint.epoch} and {asked}; "
                    f"give {setting_name(name)} above {minimum - 1} to train on (e.g. "
                    f"{setting_name(name)} {2 * (minimum - 1) or 1})")


# -- the two families ---------------------------------------------------------------------------

def _supervised() -> Family:
    from .config import (SETTING_NAMES, TrainConfig, applicable_settings, check_setting,
                         replaced_on_resume)
    from .federated.personal.spec import refuse_other_personal_state

    def more_work(config, done):
        return ("rounds" if config.unit == "round" else "epochs"), done + 1

    return Family(strategy_key="strategy",
                  known=lambda: frozenset(SETTING_NAMES), check=check_setting,
                  resumable=applicable_settings,
                  build=lambda said, defaults: TrainConfig.from_settings(said, defaults),
                  more_work=more_work, replaced=replaced_on_resume,
                  refuse_other_state=lambda saved, config, where: refuse_other_personal_state(
                      saved.get("personalize"), config.setting("personalize"), where))


def supervised_config(layers: list[Layer], *, checkpoint=None, defaults=None,
                      resume_from: str | None = None):
    """A supervised run's :class:`~mptrain.config.TrainConfig`."""
    return resolve(_supervised(), layers, checkpoint=checkpoint, defaults=defaults,
                   resume_from=resume_from)


# -- where a supervised run's data, model and outputs are ---------------------------------------

#: Not settings (a checkpoint keeps them as run entries, and a resumed run may move them).
RUN_LOCATIONS = ("data", "data_dir", "model", "out")
#: Which columns of ``--data hf:NAME`` hold the clients, the inputs and the labels: where
#: the data is, as the data's location is (kept with it, and taken over on resume).
DATA_COLUMNS = ("client_column", "features", "label")
RUN_LOCATIONS = RUN_LOCATIONS + DATA_COLUMNS


def run_locations(said: Mapping[str, Any], checkpoint=None, resume=None) -> dict:
    """Where the run's data and model come from and where its outputs go: what was said
    (config file < flags) over, when resuming, the checkpoint's run entries and the folder
    it was resumed from. The checkpoint's user code must have been named again
    (``checkpoint.user_code_in``)."""
    locations = {k: said.get(k) for k in RUN_LOCATIONS}
    if checkpoint is None:
        return locations
    resumed = {k: v for k, v in checkpoint.run.items()
               if k in RUN_LOCATIONS and isinstance(v, str)}
    if "data_dir" in resumed and resumed.get("data") != "mnist":
        resumed.pop("data_dir")
    resumed["out"] = str(resume if Path(resume).is_dir() else Path(resume).parent)
    return {k: locations[k] if locations[k] is not None else resumed.get(k)
            for k in RUN_LOCATIONS}
