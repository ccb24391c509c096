"""Files a run leaves in --out, each written atomically (temp file in the same folder, then
rename), so a crash or Ctrl-C never leaves a half-written file behind."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from ..checkpoint import model_snapshot
from ..errors import UserError
from ..files import atomic_write


def prepare_out_dir(path: str | Path) -> Path:
    """Create --out and prove it is writable before any training time is spent."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} exists and is not a directory; choose another path")
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".mptrain-probe-"):
            pass
    except OSError as err:
        raise UserError(f"--out {out} is not writable ({err.strerror}); choose a directory "
                        "you can write to") from None
    return out


def write_json(path: Path, data) -> None:
    text = json.dumps(data, indent=2, sort_keys=False, default=_jsonable) + "\n"
    atomic_write(path, lambda handle: handle.write(text.encode()))


def write_jsonl(path: Path, rows) -> None:
    text = "".join(json.dumps(row, default=_jsonable) + "\n" for row in rows)
    atomic_write(path, lambda handle: handle.write(text.encode()))


def save_state_dict(path: Path, model) -> None:
    import torch

    state = model_snapshot(model)
    atomic_write(path, lambda handle: torch.save(state, handle))


def _jsonable(value):
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")
