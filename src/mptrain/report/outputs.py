"""Files a run leaves in --out, each written atomically (temp file in the same folder, then
rename), so a crash or Ctrl-C never leaves a half-written file behind."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

from ..checkpoint import model_snapshot
from ..errors import UserError
from ..errors import setting_name as named   # as the caller spelled the setting
from ..files import atomic_write
from ..leftovers import SCRATCH_FILES


def prepare_out_dir(path: str | Path) -> Path:
    """Create --out and prove it is writable before any training time is spent."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise UserError(f"{named('out')} {out} exists and is not a directory; choose another path")
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".mptrain-probe-"):
            pass
    except OSError as err:
        raise UserError(f"{named('out')} {out} is not writable ({err.strerror}); choose a directory "
                        "you can write to") from None
    return out


#: What a run may leave in --out, in the order the closing line names them.
OUTPUT_NAMES = ("summary.json", "metrics.jsonl", "client_metrics.jsonl", "metrics.csv",
                "model.pt", "best.pt", "final.pt", "curves.png", "checkpoint.pt",
                "tb")   # best, final: RL's


def outputs_line(out_dir: Path) -> str:
    """``outputs in DIR/: summary.json ...``: the files that are there (``--logger csv``'s
    metrics.csv, the checkpoint, TensorBoard's folder as they were asked for)."""
    present = [name + ("/" if (out_dir / name).is_dir() else "") for name in OUTPUT_NAMES
               if (out_dir / name).exists()]
    return f"outputs in {out_dir}/: {' '.join(present)}"


def refuse_other_runs_outputs(out_dir: Path) -> None:
    """Refuse to write into ``out_dir`` where another run's outputs are: its metrics, model
    and checkpoint would be replaced file by file (a 1-epoch run replaced a 5-epoch run's
    metrics.jsonl and checkpoint.pt without a word). A folder with none of them (empty, the
    lock file, files of the user's own) is free; so is one with a tracker's folder alone
    (``tb/``, made as a run starts: a run that ended before its first round, or a torchrun
    job restarted before its first checkpoint)."""
    present = [name for name in OUTPUT_NAMES if name != "tb" and (out_dir / name).exists()]
    if not present:
        return
    from ..errors import python_caller

    if python_caller():
        ways = [f"overwrite=True to replace it, or another {named('out')}"]
        if "checkpoint.pt" in present:
            ways.insert(0, f"resume={str(out_dir)!r} to continue it")
    else:
        ways = [f"{named('overwrite')} to replace it, or another {named('out')}"]
        if "checkpoint.pt" in present:
            ways.insert(0, f"{named('resume')} {out_dir} to continue it")
    raise UserError(f"{out_dir} holds {_what_run(out_dir)} ({', '.join(present)}); "
                    f"{', '.join(ways)}")


def remove_other_runs_outputs(out_dir: Path) -> None:
    """``--overwrite``: the earlier run's outputs go before this run writes its own. Replaced
    file by file, those this run does not write stayed (its checkpoint.pt without
    --checkpoint-every, which '--resume' then took for this run's; RL's best.pt, a fedavg
    run's client_metrics.jsonl) and the closing line named them as this run's. The user's
    own files and a tracker's ``tb/`` (which holds runs side by side) stay; so did a
    killed federated run's scratch state (7.4 GiB for 10,000 Ditto clients of the 2NN)."""
    for name in OUTPUT_NAMES + SCRATCH_FILES:
        if name != "tb":
            (out_dir / name).unlink(missing_ok=True)


def _what_run(out_dir: Path) -> str:
    """The run whose outputs ``out_dir`` holds, as its files tell: ``a finished 5-epoch
    run``, ``an unfinished run of 3 rounds`` (stopped or failed: metrics.jsonl's rows), or
    ``another run's outputs``."""
    try:
        summary = json.loads((out_dir / "summary.json").read_text())
        done, unit = int(summary["rounds_done"]), summary.get("unit") or "round"
        return f"a finished {done}-{unit} run"
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        with open(out_dir / "metrics.jsonl", "rb") as handle:
            rows = sum(1 for line in handle if line.strip())
        return f"an unfinished run of {rows} round{'s' if rows != 1 else ''}"
    except OSError:
        return "another run's outputs"


def write_json(path: Path, data) -> None:
    text = json_text(data, indent=2) + "\n"
    atomic_write(path, lambda handle: handle.write(text.encode()))


def write_jsonl(path: Path, rows) -> None:
    text = "".join(json_text(row) + "\n" for row in rows)
    atomic_write(path, lambda handle: handle.write(text.encode()))


def json_text(data, indent: int | None = None) -> str:
    """Strict JSON, the only kind mptrain writes: a value that is not a finite number (a
    diverged loss, a ratio over nothing) is null -- Python's NaN and Infinity are not JSON
    and other parsers refuse them."""
    return json.dumps(_finite(data), indent=indent, allow_nan=False, default=_jsonable)


def save_state_dict(path: Path, model) -> None:
    import torch

    state = model_snapshot(model)
    atomic_write(path, lambda handle: torch.save(state, handle))


def _finite(value):
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def _jsonable(value):
    if hasattr(value, "item"):   # numpy and torch scalars
        return _finite(value.item())
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")
