"""What the parent makes of a round's per-client evaluation: the ranks' scores joined, the
summary figures for the round's row, and ``client_metrics.jsonl`` -- one line per client
and evaluated round (``round``, ``client``, ``name`` where the data names its clients,
``samples``, ``accuracy``, ``loss``), the long format ``pandas.read_json(path,
lines=True)`` loads as it is.

The file grows by one block per evaluated round, written with one ``write`` to a file
opened for appending, so a reader never sees a round half written but for a torn last line
after a crash. Before the first block of an attempt -- a new run, a resume, a restart of
the workers -- the rows of that round and later (the run's earlier life, or a previous
run's in the same ``--out``) are dropped, torn lines with them, by an atomic rewrite: the
file then holds exactly the rounds this run has evaluated.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ...federated.client_accuracy import ClientScores
from ...federated.client_stats import summarize
from ...files import atomic_write
from ...report.outputs import json_text

FILE_NAME = "client_metrics.jsonl"


def joined_scores(reports) -> ClientScores | None:
    """Every rank's ``client_scores`` of the round as one, or None when none scored."""
    parts = [r.extras["client_scores"] for r in reports if "client_scores" in r.extras]
    if not parts:
        return None
    return ClientScores.joined([ClientScores.from_lists(p) for p in parts])


def summary_of(scores: ClientScores) -> dict:
    return summarize(scores.samples, scores.correct, scores.loss_sum)


def client_rows(round_number: int, scores: ClientScores, names=None) -> list[dict]:
    """One row per scored client; ``names``: the data's client names (None: ids only)."""
    accuracy, loss = scores.accuracy().tolist(), scores.loss().tolist()
    rows = []
    for position, client in enumerate(scores.clients):
        row = {"round": round_number, "client": client}
        if names is not None:
            row["name"] = names[client]
        row.update(samples=int(scores.samples[position]), accuracy=accuracy[position],
                   loss=loss[position])
        rows.append(row)
    return rows


class ClientMetricsFile:
    """``client_metrics.jsonl`` under ``out_dir`` (see the module's docstring)."""

    def __init__(self, out_dir: Path):
        self.path = Path(out_dir) / FILE_NAME
        self.last_round = None   # the last round written by this attempt

    def add(self, round_number: int, rows: list[dict]) -> None:
        """Append a round's rows; a round at or before the last one written (a restart
        re-running rounds) first drops that round and the later ones."""
        if self.last_round is None or round_number <= self.last_round:
            self._keep_before(round_number)
        with open(self.path, "ab") as handle:
            handle.write("".join(json_text(row) + "\n" for row in rows).encode())
            handle.flush()
            os.fsync(handle.fileno())
        self.last_round = round_number

    def _keep_before(self, round_number: int) -> None:
        if not self.path.exists():
            return
        kept = []
        for line in self.path.read_text().splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue    # a line torn by a crash
            if isinstance(row, dict) and isinstance(row.get("round"), int) \
                    and row["round"] < round_number:
                kept.append(line + "\n")
        text = "".join(kept).encode()
        atomic_write(self.path, lambda handle: handle.write(text))
