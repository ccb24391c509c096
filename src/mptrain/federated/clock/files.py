"""Reading the clock's files -- device speeds and availability traces -- without letting a
file choose code to run.

FedScale ships both as pickles (``client_device_capacity``, ``client_behave_trace``), and a
pickle may name any importable callable for the reader to call. Here a pickle is read by an
unpickler that refuses every global: plain dicts, lists, strings and numbers need none, so
FedScale's files load and a crafted one stops at its first global with one line that says how
to convert it. JSON is the plain alternative (keys are client or profile ids as strings), and
CSV with a header row for speeds.
"""

from __future__ import annotations

import csv
import io
import json
import pickle
from pathlib import Path

from ...errors import UserError

#: Pickles begin with the PROTO opcode (protocol 2 and later); protocols 0 and 1 have no mark.
_PICKLE_MAGIC = b"\x80"
_CONVERT = ("convert it to JSON: python -c \"import json,pickle,sys; "
            "json.dump(pickle.load(open(sys.argv[1],'rb')), open(sys.argv[2],'w'))\" IN OUT "
            "(on a file you trust)")


class _PlainDataUnpickler(pickle.Unpickler):
    """An unpickler for plain data only: any global (a class, a function) is refused."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"it names {module}.{name}, and only plain dicts, lists, "
                                     "strings and numbers are read")


def read_mapping(path: str | Path, what: str) -> dict:
    """The dict a speeds or trace file holds (JSON, CSV with a header, or a plain-data
    pickle); ``what`` names the file in errors ("--client-speeds file")."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise UserError(f"{what} {path}: cannot read it ({err.strerror or err})") from None
    if raw.startswith(_PICKLE_MAGIC):
        try:
            data = _PlainDataUnpickler(io.BytesIO(raw)).load()
        except Exception as err:   # a damaged pickle raises any of a dozen types
            raise UserError(f"{what} {path}: not read as a pickle of plain data ({err}); "
                            f"{_CONVERT}") from None
    elif path.suffix.lower() == ".csv":
        data = _read_csv(raw, path, what)
    else:
        try:
            data = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise UserError(f"{what} {path}: neither JSON, CSV (.csv) nor a pickle ({err})"
                            ) from None
    if not isinstance(data, dict):
        raise UserError(f"{what} {path}: expected a mapping of client ids to their entries, "
                        f"got {type(data).__name__}")
    return data


def _read_csv(raw: bytes, path: Path, what: str) -> dict:
    """Rows ``client_id,field,...`` under a header: {client_id: {field: value}}."""
    try:
        rows = list(csv.DictReader(io.StringIO(raw.decode("utf-8"))))
    except (UnicodeDecodeError, csv.Error) as err:
        raise UserError(f"{what} {path}: not read as CSV ({err})") from None
    if not rows or "client_id" not in rows[0]:
        raise UserError(f"{what} {path}: a CSV file needs a header row starting client_id "
                        "and one row per client")
    data = {}
    for row in rows:
        key = row.pop("client_id")
        try:
            data[key] = {field: float(value) for field, value in row.items()}
        except (TypeError, ValueError):
            raise UserError(f"{what} {path}: client {key}: every field must be a number, "
                            f"got {row}") from None
    return data


def client_id(key, path: Path | str, what: str) -> int:
    """A file's key as a non-negative integer id ("17" and 17 alike)."""
    try:
        value = int(key)
    except (TypeError, ValueError):
        value = -1
    if value < 0 or str(value) != str(key).strip():
        raise UserError(f"{what} {path}: client ids must be non-negative integers, got {key!r}")
    return value


def number(entry: dict, field: str, key, path, what: str) -> float:
    """``entry[field]`` as a finite positive float, or one line naming the client."""
    value = entry.get(field) if isinstance(entry, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 \
            or value == float("inf"):
        raise UserError(f"{what} {path}: client {key}: {field!r} must be a positive number, "
                        f"got {value!r}")
    return float(value)
