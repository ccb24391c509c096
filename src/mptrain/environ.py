"""Environment variables set for a while and put back as they were."""

from __future__ import annotations

import os
from contextlib import contextmanager


@contextmanager
def environment(values: dict[str, str], keep_set: bool = False):
    """``values`` in ``os.environ`` while the block runs, the environment as it was after it.

    ``keep_set``: a name already set keeps its value (the user's own setting wins).
    """
    saved = {name: os.environ.get(name) for name in values}
    for name, value in values.items():
        if keep_set:
            os.environ.setdefault(name, value)
        else:
            os.environ[name] = value
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
