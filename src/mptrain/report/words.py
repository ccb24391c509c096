"""Counts in words: ``1 epoch``, ``2 epochs``, ``10,000 steps`` -- one place, so no line of
the run's output says "1 epochs"."""

from __future__ import annotations


def count(number: int, word: str, plural: str | None = None) -> str:
    """``number`` and ``word``, the word in the plural unless the number is one."""
    shown = f"{number:,}" if isinstance(number, int) else f"{number:g}"
    return f"{shown} {word if number == 1 else plural or _plural(word)}"


def _plural(word: str) -> str:
    if word.endswith(("s", "x")):   # process, box; epoch takes a plain s
        return word + "es"
    return word + "s"
