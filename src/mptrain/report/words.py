"""Counts and sizes in words: ``1 epoch``, ``2 epochs``, ``10,000 steps``, ``23.4 GiB`` --
one place, so no line of the run's output says "1 epochs" and every size reads alike."""

from __future__ import annotations


def count(number: int, word: str, plural: str | None = None) -> str:
    """``number`` and ``word``, the word in the plural unless the number is one."""
    shown = f"{number:,}" if isinstance(number, int) else f"{number:g}"
    return f"{shown} {word if number == 1 else plural or _plural(word)}"


def _plural(word: str) -> str:
    if word.endswith(("s", "x")):   # process, box; epoch takes a plain s
        return word + "es"
    return word + "s"


def human_bytes(n):
    """Size in binary units with one decimal ("23.4 GiB"); "unknown" for None."""
    if n is None:
        return "unknown"
    if abs(n) < 1024:
        return f"{int(n)} B"
    value = n / 1024
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        if round(abs(value), 1) < 1024:  # so 1023.97 KiB reads "1.0 MiB", not "1024.0 KiB"
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} PiB"
