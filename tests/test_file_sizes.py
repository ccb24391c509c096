"""The federated rooms stay readable: no file of ``federated/``, ``strategies/fedavg/`` or
``strategies/fedbuff/`` past 300 lines (issue 52: a file that grows past it is asking to be
split, as ``worker.py`` did twice)."""

from __future__ import annotations

from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[1] / "src" / "mptrain"
MOST_LINES = 300


@pytest.mark.parametrize("room", ["federated", "strategies/fedavg", "strategies/fedbuff"])
def test_no_file_of_the_federated_rooms_is_over_300_lines(room):
    lengths = {str(path.relative_to(SOURCE)): len(path.read_text().splitlines())
               for path in (SOURCE / room).rglob("*.py")}
    assert lengths and {name: n for name, n in lengths.items() if n > MOST_LINES} == {}
