"""``--logger csv``: metrics.csv next to metrics.jsonl, the same rows for spreadsheets and
pandas. It mirrors metrics.jsonl (which the run has just rewritten when a round ends), so a
resumed or restarted run's file holds exactly the rounds that metrics.jsonl holds; a column
appears when a round first has it (the header grows), and the file is replaced atomically
at every round."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from ..callbacks import logger_setting
from ..errors import UserError
from ..errors import setting_name as named   # as the caller spelled the setting
from .common import Tracker

FILENAME = "metrics.csv"


class CsvTracker(Tracker):
    name = "csv"
    library = "nothing"

    @classmethod
    def check_place(cls, out_dir, tb_dir):
        if out_dir is None:
            raise UserError(f"{logger_setting()} csv needs {named('out')} DIR (metrics.csv "
                            "goes next to metrics.jsonl)")

    def where(self):
        return f"csv {self.out_dir / FILENAME}"

    def on_round_end(self, row):
        rows = [json.loads(line) for line in
                (self.out_dir / "metrics.jsonl").read_text().splitlines() if line]
        write_csv(self.out_dir / FILENAME, rows)


def write_csv(path: Path, rows: list[dict]) -> None:
    from ..files import atomic_write

    columns: dict[str, None] = {}
    for row in rows:
        columns.update(dict.fromkeys(row))
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _cell(v) for k, v in row.items()})
    data = text.getvalue().encode()
    atomic_write(path, lambda handle: handle.write(data))


def _cell(value):
    if value is None:
        return ""
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value)
    return value
