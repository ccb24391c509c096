"""LEAF's JSON files read user by user: ``{"users": [...], "num_samples": [...],
"hierarchies": [...], "user_data": {uid: {"x": [...], "y": [...]}}}``.

``json.load`` of a FEMNIST file makes a Python float (24 bytes and an 8-byte pointer) of
every pixel: 30 bytes where the array keeps 4, and all of the file at once. Here the file's
top-level object is walked by hand and each user's value decoded on its own by the standard
library's decoder (``raw_decode``), so at most one user's Python objects are alive beside
the file's text. The leading lists (``users``, ``num_samples``) are read from a prefix of
the file, grown until they are complete: counting a folder reads a few kB per file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ...errors import UserError

_SPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
_FIRST_PREFIX = 1 << 16
#: The leading lists of a LEAF file, everything but ``user_data``.
LEADING_KEYS = ("users", "num_samples", "hierarchies")


class _Truncated(Exception):
    """The text ends inside the value being read (a prefix of the file)."""


def walk(text: str, path: Path, complete: bool = True):
    """Yield ``(key, value)`` for each top-level entry but ``user_data``; for ``user_data``,
    ``("user_data", None)`` as it begins, then ``("user", uid, value)`` for each user, in
    the file's order. A value is yielded only once the separator after it is read, so a
    value cut short by the end of a prefix is never taken for the whole. ``complete``: the
    text is the whole file (otherwise its end raises ``_Truncated``)."""
    at = _skip(text, _expect(text, _skip(text, 0), "{", path, complete))
    if _peek(text, at, path, complete) == "}":
        return
    while True:
        key, at = _decode(text, at, path, complete)
        at = _skip(text, _expect(text, _skip(text, at), ":", path, complete))
        if key == "user_data":
            yield "user_data", None
            at = yield from _users(text, at, path, complete)
            at = _separator(text, at, path, complete)
        else:
            value, at = _decode(text, at, path, complete)
            at = _separator(text, at, path, complete)
            yield key, value
        if text[at] == "}":
            return
        at = _skip(text, at + 1)


def _users(text: str, at: int, path: Path, complete: bool):
    at = _skip(text, _expect(text, at, "{", path, complete))
    if _peek(text, at, path, complete) == "}":
        return at + 1
    while True:
        uid, at = _decode(text, at, path, complete)
        at = _skip(text, _expect(text, _skip(text, at), ":", path, complete))
        value, at = _decode(text, at, path, complete)
        at = _skip(text, at)
        mark = _peek(text, at, path, complete)
        if mark not in ",}":
            raise _malformed(path, at, "',' or '}'")
        yield "user", uid, value
        if mark == "}":
            return at + 1
        at = _skip(text, at + 1)


def leading_lists(path: Path) -> dict:
    """``users``, ``num_samples`` and, where they come first, ``hierarchies`` of one file,
    read from as short a prefix as holds them (all of the file when ``user_data`` comes
    before them: its users are then read through and dropped, one at a time)."""
    size = path.stat().st_size
    length = _FIRST_PREFIX
    with path.open("rb") as handle:
        while True:
            raw = handle.read(length) if length < size else handle.read()
            handle.seek(0)
            complete = len(raw) >= size
            text = _text(raw, path, complete)
            found: dict = {}
            try:
                for entry in walk(text, path, complete):
                    if entry[0] == "user_data" and "users" in found \
                            and "num_samples" in found:
                        return found
                    if entry[0] in LEADING_KEYS:
                        found[entry[0]] = entry[1]
                return found
            except _Truncated:
                length *= 4


def read_text(path: Path) -> str:
    """The file's text, decoded from a read-only mapping of the file: the bytes are the
    page cache's, not a private copy beside the text (which ``read_bytes`` would hold until
    the text is made: twice the file at the peak)."""
    import mmap

    with path.open("rb") as handle:
        if path.stat().st_size == 0:
            return ""
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            return _text(mapped, path, True)


def _text(raw, path: Path, complete: bool) -> str:
    try:
        return str(raw, "utf-8")
    except UnicodeDecodeError as err:
        if not complete and err.start >= len(raw) - 4:   # a character cut by the prefix
            return str(raw[:err.start], "utf-8")
        raise UserError(f"LEAF file {path} is not UTF-8 text (byte {err.start}); LEAF "
                        "writes its data as JSON") from None


def _skip(text: str, at: int) -> int:
    return _SPACE.match(text, at).end()


def _peek(text: str, at: int, path: Path, complete: bool) -> str:
    if at >= len(text):
        if complete:
            raise _malformed(path, at, "more")
        raise _Truncated
    return text[at]


def _expect(text: str, at: int, char: str, path: Path, complete: bool) -> int:
    if _peek(text, at, path, complete) != char:
        raise _malformed(path, at, repr(char))
    return at + 1


def _separator(text: str, at: int, path: Path, complete: bool) -> int:
    at = _skip(text, at)
    if _peek(text, at, path, complete) not in ",}":
        raise _malformed(path, at, "',' or '}'")
    return at


def _decode(text: str, at: int, path: Path, complete: bool):
    try:
        return _DECODER.raw_decode(text, at)
    except json.JSONDecodeError as err:
        if not complete:
            raise _Truncated from None
        raise UserError(f"LEAF file {path} is not valid JSON: {err.msg} at character "
                        f"{err.pos}") from None
    except RecursionError:   # the decoder recurses per level: a hostile file's [[[[...
        raise UserError(f"LEAF file {path} holds a value nested too deeply (from character "
                        f"{at}); LEAF's samples are lists of numbers or strings") from None


def _malformed(path: Path, at: int, wanted: str) -> UserError:
    return UserError(f"LEAF file {path} is not a LEAF data file: expected {wanted} at "
                     f"character {at} (LEAF's layout is {{\"users\": [...], \"num_samples\": "
                     "[...], \"user_data\": {...}})")
