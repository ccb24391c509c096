"""Checkpoints: written atomically at epoch ends, loaded without unpickling arbitrary objects.

A checkpoint holds what an exact resume needs: the model the strategy produced, every
rank's optimizer state and RNG state, the next epoch, and the run's settings. Data order
and learning rate are functions of (seed, epoch), so they need no saving. Each worker
serialises its own part (``worker_state``) and the parent writes one file.
"""

from __future__ import annotations

import io
import pickle
import zipfile
from dataclasses import dataclass
from pathlib import Path

import torch

from .errors import UserError
from .report.outputs import atomic_write

FORMAT = "mptrain-checkpoint"
VERSION = 1
FILENAME = "checkpoint.pt"


def worker_state(rank: int, model, optimizer) -> bytes:
    """This rank's part of a checkpoint, as bytes (tensors must not travel as shared handles)."""
    state = {"rank": rank, "optimizer": optimizer.state_dict(), "rng": torch.get_rng_state()}
    if model is not None:
        state["model"] = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def decode_worker_state(payload: bytes) -> dict:
    return torch.load(io.BytesIO(payload), weights_only=True)


@dataclass
class Checkpoint:
    epoch: int                  # epochs completed = the epoch to resume at
    strategy: str
    config: dict
    run: dict                   # data, data_dir, model: what to rebuild the run from
    model: dict
    ranks: list[dict]           # per rank: optimizer, rng
    metrics: list[dict]

    @property
    def world_size(self) -> int:
        """One entry of ``ranks`` per worker that trained."""
        return len(self.ranks)

    def as_dict(self) -> dict:
        return {"format": FORMAT, "version": VERSION, "epoch": self.epoch,
                "world_size": self.world_size, "strategy": self.strategy,
                "config": self.config, "run": self.run, "model": self.model,
                "ranks": self.ranks, "metrics": self.metrics}


def assemble(epoch: int, payloads: list[bytes], strategy: str, config: dict, run: dict,
             metrics: list[dict]) -> Checkpoint:
    states = sorted((decode_worker_state(p) for p in payloads), key=lambda s: s["rank"])
    model = states[0].get("model")
    if model is None:
        raise ValueError("rank 0 sent no model state")
    ranks = [{"optimizer": s["optimizer"], "rng": s["rng"]} for s in states]
    return Checkpoint(epoch=epoch, strategy=strategy, config=config,
                      run=run, model=model, ranks=ranks, metrics=metrics)


def save(directory: Path, checkpoint: Checkpoint) -> Path:
    path = Path(directory) / FILENAME
    atomic_write(path, lambda handle: torch.save(checkpoint.as_dict(), handle))
    return path


def load(location: str | Path) -> Checkpoint:
    """Load ``location`` (a checkpoint file or the --out folder holding one)."""
    path = Path(location)
    if path.is_dir():
        path = path / FILENAME
    if not path.is_file():
        raise UserError(f"no checkpoint at {path}; give --resume the --out folder of a run "
                        "that used --checkpoint-every")
    try:
        data = torch.load(path, weights_only=True, map_location="cpu")
    except (RuntimeError, EOFError, zipfile.BadZipFile, pickle.UnpicklingError,
            ValueError, OSError) as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise UserError(f"{path} is not a readable mptrain checkpoint (truncated, corrupt or "
                        f"foreign: {reason}); use another checkpoint") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise UserError(f"{path} is not an mptrain checkpoint (no '{FORMAT}' marker); "
                        "point --resume at a folder written by mptrain run --checkpoint-every")
    if data.get("version") != VERSION:
        raise UserError(f"{path} has checkpoint version {data.get('version')}, this mptrain "
                        f"reads version {VERSION}")
    return Checkpoint(epoch=data["epoch"],
                      strategy=data["strategy"], config=data["config"], run=data["run"],
                      model=data["model"], ranks=data["ranks"], metrics=data["metrics"])
