"""Counts in words: no "1 epochs", no "5 epoches"."""

import pytest

from mptrain.report.words import count


@pytest.mark.parametrize("number, word, said", [
    (1, "epoch", "1 epoch"), (5, "epoch", "5 epochs"), (1, "round", "1 round"),
    (10_000, "step", "10,000 steps"), (2, "actor process", "2 actor processes"),
    (1, "thread", "1 thread"), (0, "worker", "0 workers"),
])
def test_count(number, word, said):
    assert count(number, word) == said
