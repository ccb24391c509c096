"""Counts and sizes in words: no "1 epochs", no "5 epoches", every size in one format."""

import pytest

from mptrain.report.words import count, human_bytes


@pytest.mark.parametrize("number, word, said", [
    (1, "epoch", "1 epoch"), (5, "epoch", "5 epochs"), (1, "round", "1 round"),
    (10_000, "step", "10,000 steps"), (2, "actor process", "2 actor processes"),
    (1, "thread", "1 thread"), (0, "worker", "0 workers"),
])
def test_count(number, word, said):
    assert count(number, word) == said


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (None, "unknown"),
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (1536, "1.5 KiB"),
        (1024**2 - 1, "1.0 MiB"),
        (int(23.4 * 1024**3), "23.4 GiB"),
        (3 * 1024**4, "3.0 TiB"),
        (2 * 1024**5, "2.0 PiB"),
    ],
)
def test_human_bytes(n, text):
    assert human_bytes(n) == text
