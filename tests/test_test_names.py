"""Every test module has a basename of its own: the suite runs with ``rootdir`` imports
(``pythonpath = ["tests"]``, no packages), where two ``test_schedule.py`` in different
folders make the whole collection fail in a clean clone -- while a subset run from a
worktree, which collects only one of them, passes."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_no_two_test_modules_share_a_basename():
    names = Counter(path.name for path in TESTS.rglob("test_*.py"))
    assert sorted(name for name, seen in names.items() if seen > 1) == []
