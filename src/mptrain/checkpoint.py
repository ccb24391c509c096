"""Checkpoints: written atomically at epoch ends, loaded without unpickling arbitrary objects.

A checkpoint holds what an exact resume needs: the model the strategy produced, every
rank's own state (optimizer and RNG for the epoch strategies; for fedavg the server
optimizer's state, SCAFFOLD's variates, the DP clip and the accountant's history), the next
round, and the run's settings. Data order, sampled clients and learning
rate are functions of (seed, round), so they need no saving. Each worker serialises its own
part (its program's ``state()``) and the parent writes one file.
"""

from __future__ import annotations

import io
import os
import pickle
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from .errors import UserError, error_line, python_caller
from .errors import setting_name as named   # as the caller spelled the setting
from .files import STOPS, atomic_write, behind

FORMAT = "mptrain-checkpoint"
VERSION = 1
FILENAME = "checkpoint.pt"


def model_snapshot(model: torch.nn.Module) -> dict:
    """A copy of ``model``'s state dict on the CPU, detached from the live (often shared)
    tensors that training goes on writing: what a checkpoint or ``model.pt`` holds. In the
    usual (contiguous) layout whatever the layout the model trained in."""
    return {k: v.detach().cpu().clone(memory_format=torch.contiguous_format)
            for k, v in model.state_dict().items()}


def decode_worker_state(payload: bytes) -> dict:
    return torch.load(io.BytesIO(payload), weights_only=True)


@dataclass
class Checkpoint:
    epoch: int                  # rounds (epochs) completed = the round to resume at
    strategy: str
    config: dict
    run: dict                   # data, data_dir, model: what to rebuild the run from
    model: dict
    ranks: list[dict]           # per rank: what its worker program's state() holds
    metrics: list[dict]
    #: What the run trained on (``data.fingerprint``), checked on resume; None: not
    #: recorded (an RL run, a checkpoint written before fingerprints).
    data: dict | None = None
    #: The file it was loaded from (None: made in memory), not part of the file.
    source: Path | None = field(default=None, compare=False, repr=False)

    @property
    def world_size(self) -> int:
        """One entry of ``ranks`` per worker that trained."""
        return len(self.ranks)

    def as_dict(self) -> dict:
        return {"format": FORMAT, "version": VERSION, "epoch": self.epoch,
                "world_size": self.world_size, "strategy": self.strategy,
                "config": self.config, "run": self.run, "model": self.model,
                "ranks": self.ranks, "metrics": self.metrics, "data": self.data}


def assemble(epoch: int, payloads: list[bytes], strategy: str, config: dict, run: dict,
             metrics: list[dict], data: dict | None = None) -> Checkpoint:
    states = sorted((decode_worker_state(p) for p in payloads), key=lambda s: s["rank"])
    model = states[0].get("model")
    if model is None:
        raise ValueError("rank 0 sent no model state")
    ranks = [{k: v for k, v in s.items() if k not in ("rank", "model")} for s in states]
    return Checkpoint(epoch=epoch, strategy=strategy, config=config,
                      run=run, model=model, ranks=ranks, metrics=metrics, data=data)


def resolve_resume(resume: str | Path | Checkpoint | None,
                   out: str | Path | None) -> tuple[Checkpoint | None, str | Path | None]:
    """The checkpoint to resume from (``resume``: one already loaded, a checkpoint file or
    the --out folder holding one) and the folder the run writes to: ``out`` if given, else,
    as with ``mptrain run --resume DIR``, the folder the checkpoint is in."""
    if resume is not None and not isinstance(resume, (str, os.PathLike, Checkpoint)):
        raise UserError(f"{named('resume')} takes a folder or checkpoint file (a str or "
                        f"pathlib.Path), or a loaded Checkpoint, got {type(resume).__name__}")
    check_folder_argument("out", out)
    checkpoint = resume if isinstance(resume, Checkpoint) or resume is None else load(resume)
    if out is None and isinstance(resume, (str, Path)):
        out = resume if Path(resume).is_dir() else Path(resume).parent
    return checkpoint, out


def check_folder_argument(name: str, value) -> None:
    """Refuse a folder argument of Python's (``out``, ``tb_dir``) that is not a path: it
    was a TypeError from deep in pathlib."""
    if value is not None and not isinstance(value, (str, os.PathLike)):
        raise UserError(f"{named(name)} takes a folder (a str or pathlib.Path), got "
                        f"{type(value).__name__}")


def save(directory: Path, checkpoint: Checkpoint,
         on_saved: Callable[[Path], None] | None = None) -> Path:
    """Write ``checkpoint`` into ``directory`` atomically; ``on_saved(path)`` runs as it
    lands, before a stop signal can act (see :func:`atomic_write`)."""
    path = Path(directory) / FILENAME
    atomic_write(path, lambda handle: torch.save(checkpoint.as_dict(), handle),
                 on_replaced=None if on_saved is None else lambda: on_saved(path))
    return path


def load(location: str | Path) -> Checkpoint:
    """Load ``location`` (a checkpoint file or the --out folder holding one)."""
    path = Path(location)
    if path.is_dir():
        path = path / FILENAME
    if not path.is_file():
        raise UserError(f"no checkpoint at {path}; give {named('resume')} the {named('out')} "
                        f"folder of a run that used {named('checkpoint_every')}")
    try:
        data = torch.load(path, weights_only=True, map_location="cpu")
    except MemoryError:   # a valid checkpoint larger than this machine's free memory
        raise UserError(f"not enough memory to load {path} ({path.stat().st_size / 2**20:,.0f} "
                        "MiB); free memory or resume on a larger machine") from None
    except Exception as err:   # a foreign file fails anywhere: IndexError, KeyError, ...
        stop = behind(err, STOPS)   # a stop that torch's cleanup replaced: the stop
        if stop is not None:
            raise stop from None
        raise UserError(f"{path} is not a readable mptrain checkpoint (truncated, corrupt or "
                        f"foreign: {_load_failure(err)}); use another checkpoint") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise UserError(f"{path} is not an mptrain checkpoint (no '{FORMAT}' marker); "
                        f"point {named('resume')} at a folder written by a run with "
                        f"{named('checkpoint_every')}")
    if data.get("version") != VERSION:
        raise UserError(f"{path} has checkpoint version {data.get('version')!r}, this "
                        f"mptrain reads version {VERSION}")
    _check_fields(path, data)
    return Checkpoint(epoch=data["epoch"],
                      strategy=data["strategy"], config=data["config"], run=data["run"],
                      model=data["model"], ranks=data["ranks"], metrics=data["metrics"],
                      data=data.get("data"), source=path)


def _load_failure(err: Exception) -> str:
    """Why ``torch.load`` refused a file, in a few words. Not torch's own message for a
    pickle of other objects: it advises ``weights_only=False``, which would run whatever
    the file holds."""
    if isinstance(err, pickle.UnpicklingError) and "weights_only" in str(err):
        return "torch's weights-only load refused its contents"
    return error_line(err)


#: What each part of a checkpoint must be: a file that passes ``weights_only`` loading can
#: still hold anything of these plain types, and a wrong one must be a clear refusal, not a
#: traceback deep in the resumed run.
_FIELD_TYPES = {"epoch": int, "strategy": str, "config": dict, "run": dict, "model": dict,
                "ranks": list, "metrics": list}


def _check_fields(path: Path, data: dict) -> None:
    for name, kind in _FIELD_TYPES.items():
        value = data.get(name)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise UserError(f"{path} is damaged: its {name!r} is "
                            f"{type(value).__name__}, not {kind.__name__}; use another "
                            "checkpoint")
    if data["epoch"] < 0 or not all(isinstance(rank, dict) for rank in data["ranks"]) \
            or not all(isinstance(row, dict) for row in data["metrics"]):
        raise UserError(f"{path} is damaged (its rounds or per-rank parts are malformed); "
                        "use another checkpoint")
    if data.get("data") is not None and not isinstance(data["data"], dict):
        raise UserError(f"{path} is damaged: its 'data' is {type(data['data']).__name__}, "
                        "not dict; use another checkpoint")
    if not all(isinstance(key, str) for key in data["config"]):
        raise UserError(f"{path} is damaged (its settings are malformed); use another "
                        "checkpoint")


def user_code_in(checkpoint: Checkpoint, names: dict[str, str | None]) -> None:
    """Refuse to take user code from a checkpoint: each of ``names`` (a setting or run
    entry -> the value the user gave on this invocation, None if not given) that the
    checkpoint sets to an import string or a file path must be given again, the same.

    Loading a file must never choose code to run: built-in names (``digits``, ``iid``) may
    come from a checkpoint, the user's own modules only from the user's own flags, config
    file or call."""
    recorded = {**checkpoint.config, **checkpoint.run}
    for name, given in names.items():
        value = recorded.get(name)
        if not names_users_code(name, value):
            continue
        flag = named(name)
        if given is None:
            raise UserError(f"the checkpoint names your code {flag} {value!r}; a checkpoint "
                            f"never chooses code to run: give {flag} {value!r} again to "
                            "resume")
        if given != value:
            raise UserError(f"the checkpoint was written with {flag} {value!r} but "
                            f"{flag} {given!r} was given; resume with the same {flag}")


#: The settings and run entries that may name the user's code (import strings, file paths).
USER_CODE_NAMES = ("data", "model", "partition", "transform", "collate", "env", "net")


def user_code_flags(recorded: dict) -> list[str]:
    """The flags that name the user's code in ``recorded`` (a run's settings and run
    entries), as a resume must give them again (see :func:`user_code_in`)."""
    flags = []
    for name, value in _user_code(recorded):
        flags += ["--" + name, shlex.quote(value)]
    return flags


def _user_code(recorded: dict) -> list[tuple[str, str]]:
    return [(name, recorded[name]) for name in USER_CODE_NAMES
            if names_users_code(name, recorded.get(name))]


def names_users_code(name: str, value) -> bool:
    """Whether setting or run entry ``name`` set to ``value`` names the user's code (an
    import string or a file path), which a checkpoint never supplies. A built-in partition
    has a colon too (``dirichlet:0.3``, ``shards:2``) but names no code: the checkpoint
    holds it, and a resume without it trains the same clients."""
    from .imports import NATURAL_DATA_PREFIXES, can_name_code

    if name == "data" and isinstance(value, str) and value.startswith(NATURAL_DATA_PREFIXES):
        return False   # leaf:femnist, hf:mnist: a folder or a Hub set, read as data
    return name in USER_CODE_NAMES and isinstance(value, str) and can_name_code(value)


class CheckpointKeeper:
    """Assembles checkpoints from the ranks' parts; keeps the latest in memory (for
    restarts) and on disk (with --out and --checkpoint-every)."""

    def __init__(self, config, run_info: dict, out_dir: Path | None,
                 resume: Checkpoint | None, keep_on_disk: bool = False,
                 data: dict | None = None):
        """``keep_on_disk``: write every round's checkpoint to ``out_dir`` even without
        --checkpoint-every (torchrun's restarts start new processes, which resume from
        the disk only); ``data``: the data's fingerprint, recorded in each checkpoint."""
        self.config, self.run_info, self.data = config, run_info, data
        self.out_dir = out_dir if config.checkpoint_every or keep_on_disk else None
        self.every = config.checkpoint_every or \
            (1 if config.max_restarts or keep_on_disk else None)
        self.latest = resume
        # What is on disk, which lags ``latest`` while a save is under way: the stop message
        # names these, so they change only together with the file (see ``offer``).
        self.saved_path: Path | None = None
        self.saved_epoch: int | None = None
        if resume is not None and out_dir is not None and (out_dir / FILENAME).is_file():
            # A resumed run continues in the folder it was resumed from: until it saves,
            # the checkpoint there is the one a stop leaves.
            self.saved_path, self.saved_epoch = out_dir / FILENAME, resume.epoch

    def offer(self, done: int, reports, history) -> Path | None:
        """Keep a checkpoint after round ``done`` if every rank sent its part; return the
        path it was written to (None if it was kept in memory only, or not at all)."""
        payloads = [r.checkpoint for r in reports]
        if not payloads or any(p is None for p in payloads):
            return None
        self.latest = assemble(done, payloads, self.config.strategy, self.config.as_dict(),
                               self.run_info, [m.as_dict() for m in history], self.data)
        if self.out_dir is None:
            return None
        return save(self.out_dir, self.latest,
                    on_saved=lambda path: self._record_saved(path, done))

    def resume_command(self, command: str) -> str:
        """The command line that resumes from the saved checkpoint: ``command --resume OUT``
        and the flags naming the user's code, which a checkpoint never supplies. A Python
        caller (``fit()``) is told the keywords to call again with instead: its model and
        data are objects no command line can name."""
        recorded = {**self.config.as_dict(), **self.run_info}
        if python_caller():
            code = [f"{named(name)}={value!r}" for name, value in _user_code(recorded)]
            return f"the same call with {', '.join([f'resume={str(self.out_dir)!r}', *code])}"
        flags = user_code_flags(recorded)
        return " ".join([command, "--resume", shlex.quote(str(self.out_dir)), *flags])

    def _record_saved(self, path: Path, epoch: int) -> None:
        self.saved_path, self.saved_epoch = path, epoch


def load_model_state(checkpoint: Checkpoint, model: torch.nn.Module) -> None:
    """Load ``checkpoint``'s model into ``model``, refusing in one line a model it does not
    fit (another ``--model``, another class or size given to ``fit()``): torch says so in a
    traceback of every missing and unexpected key."""
    mismatch = _model_mismatch(checkpoint.model, model.state_dict())
    if mismatch is None:
        try:
            model.load_state_dict(checkpoint.model)
            return
        except Exception as err:   # what the file holds: it must not crash us
            mismatch = error_line(err)
    raise _not_fitting(checkpoint, mismatch)


def check_network_fits(checkpoint: Checkpoint, model: torch.nn.Module) -> None:
    """Refuse, in one line, an RL checkpoint whose network is not this run's (another
    ``--env``, ``--hidden`` or ``--net``), before anything else in it is checked against
    that network: the best policy's check called such a file damaged."""
    mismatch = _model_mismatch(checkpoint.model, model.state_dict())
    if mismatch is not None:
        raise _not_fitting(checkpoint, mismatch)


def _not_fitting(checkpoint: Checkpoint, mismatch: str) -> UserError:
    if "env" in checkpoint.run:   # an RL run: its network comes from the env and the settings
        said = checkpoint.config
        shape = f"{named('net')} {said['net']}" if said.get("net") else \
            f"{named('hidden')} {said['hidden']}" if said.get("hidden") else \
            f"without {named('hidden')}"
        return UserError(f"the checkpoint's network does not fit this run's: {mismatch}; "
                         f"resume with the network it was trained with: {named('env')} "
                         f"{said.get('env', checkpoint.run['env'])}, {shape}")
    if python_caller():
        advice = "pass fit() the model the checkpoint was trained with"
    elif isinstance(checkpoint.run.get("model"), str):
        advice = f"resume with {named('model')} {checkpoint.run['model']}"
    else:
        advice = "resume with the network settings the run was trained with"
    return UserError(f"the checkpoint's model does not fit this run's: {mismatch}; {advice}")


def _model_mismatch(saved: dict, own: dict) -> str | None:
    def some(keys):
        return ", ".join(keys[:3]) + (", ..." if len(keys) > 3 else "")

    unexpected = [k for k in saved if k not in own]
    missing = [k for k in own if k not in saved]
    parts = []
    if unexpected:
        parts.append(f"{len(unexpected)} of its tensors are not in this model "
                     f"({some(unexpected)})")
    if missing:
        parts.append(f"{len(missing)} of this model's are not in it ({some(missing)})")
    if parts:
        return " and ".join(parts)
    for key, tensor in own.items():
        theirs = saved[key]
        if isinstance(theirs, torch.Tensor) and theirs.shape != tensor.shape:
            return (f"{key} has shape {tuple(theirs.shape)} in the checkpoint, "
                    f"{tuple(tensor.shape)} here")
    return None


def check_resumable(resume: Checkpoint | None, config, workers: int, strategy) -> None:
    """Refuse to resume a checkpoint with another strategy or (strategies with per-rank
    state: optimizer states) another number of workers."""
    if resume is None:
        return
    if resume.strategy != config.strategy:
        raise UserError(f"the checkpoint was written by strategy {resume.strategy!r}; "
                        f"resume with {named('strategy')} {resume.strategy}")
    if resume.world_size != workers and not strategy.resumes_on_other_worker_counts:
        raise UserError(f"the checkpoint holds the state of {resume.world_size} workers; "
                        f"resume with {named('workers')} {resume.world_size}")
    strategy.resumed_settings = dict(resume.config)
    strategy.resuming_from(resume)
