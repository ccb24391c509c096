"""Read back what the trackers wrote, with each tracker's own reader: TensorBoard's
EventAccumulator, MLflow's MlflowClient, and W&B's offline run file (its records, in the
LevelDB log format W&B writes, decoded with W&B's own protobuf messages)."""

from __future__ import annotations

import importlib.util
import json
import struct
from pathlib import Path

LIBRARIES = {"tensorboard": "tensorboard", "mlflow": "mlflow", "wandb": "wandb"}


def installed_loggers() -> list[str]:
    """Every tracker whose library is here (csv needs none)."""
    names = [name for name, module in LIBRARIES.items()
             if importlib.util.find_spec(module) is not None]
    if "mlflow" in names and not all(importlib.util.find_spec(m) for m in
                                     ("sqlalchemy", "alembic")):
        names.remove("mlflow")
    return names + ["csv"]


# -- TensorBoard ---------------------------------------------------------------------------

def tb_accumulator(folder: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(folder), size_guidance={"scalars": 0, "images": 0,
                                                               "tensors": 0})
    accumulator.Reload()
    return accumulator


def tb_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """tag -> [(step, value)] as TensorBoard shows it (purged of what a restart redid)."""
    accumulator = tb_accumulator(folder)
    return {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)]
            for tag in accumulator.Tags()["scalars"]}


def tb_hparams(folder: Path) -> dict:
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

    accumulator = tb_accumulator(folder)
    content = accumulator.PluginTagToContent("hparams")
    data = HParamsPluginData.FromString(content["_hparams_/session_start_info"])
    values = {}
    for key, value in data.session_start_info.hparams.items():
        values[key] = getattr(value, value.WhichOneof("kind"))
    return values


def tb_session_status(folder: Path) -> str | None:
    from tensorboard.plugins.hparams.api_pb2 import Status
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

    content = tb_accumulator(folder).PluginTagToContent("hparams")
    if "_hparams_/session_end_info" not in content:
        return None
    data = HParamsPluginData.FromString(content["_hparams_/session_end_info"])
    return Status.Name(data.session_end_info.status)


# -- MLflow ---------------------------------------------------------------------------------

def mlflow_run(out: Path):
    """(client, run) of the MLflow run that ``out``'s trackers.json names."""
    from mlflow.tracking import MlflowClient

    entry = json.loads((out / "trackers.json").read_text())["mlflow"]
    client = MlflowClient(tracking_uri=entry["tracking_uri"])
    return client, client.get_run(entry["run_id"])


def mlflow_history(client, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


# -- Weights & Biases --------------------------------------------------------------------

_BLOCK = 32 * 1024
_HEADER = 7   # ":W&B", a 2-byte magic, a version byte


def wandb_run_files(out: Path) -> list[Path]:
    return sorted((out / "wandb").glob("offline-run-*/run-*.wandb"))


def wandb_records(path: Path) -> list:
    """The records of one offline run file: W&B writes them in LevelDB's log format
    (32 KiB blocks of chunks: crc32, length, type FULL/FIRST/MIDDLE/LAST)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", "not a W&B run file"
    records, pending, position = [], b"", _HEADER
    while position + 7 <= len(data):
        left = _BLOCK - position % _BLOCK
        if left < 7:
            position += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[position:position + 7])
        if kind == 0 and length == 0:   # padding to the end of the block
            position += left
            continue
        pending += data[position + 7:position + 7 + length]
        position += 7 + length
        if kind in (1, 4):              # FULL, LAST
            records.append(wandb_internal_pb2.Record.FromString(pending))
            pending = b""
    return records


def wandb_run(out: Path) -> dict:
    """What the offline run files of ``out`` hold: run ids, config, history rows, summary,
    exit codes, artifacts' types."""
    found = {"ids": [], "config": {}, "history": [], "summary": {}, "exit_codes": [],
             "artifacts": []}
    for path in wandb_run_files(out):
        for record in wandb_records(path):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                found["ids"].append(record.run.run_id)
                for item in record.run.config.update:
                    found["config"][item.key] = json.loads(item.value_json)
            elif kind == "config":
                for item in record.config.update:
                    found["config"][item.key] = json.loads(item.value_json)
            elif kind == "history":
                found["history"].append({(item.key or "/".join(item.nested_key)):
                                         json.loads(item.value_json)
                                         for item in record.history.item})
            elif kind == "summary":
                for item in record.summary.update:
                    found["summary"][item.key or "/".join(item.nested_key)] = \
                        json.loads(item.value_json)
            elif kind == "exit":
                found["exit_codes"].append(record.exit.exit_code)
            elif kind == "artifact":
                found["artifacts"].append(record.artifact.type)
    return found


def metric_rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
