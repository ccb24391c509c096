"""Where ranks come from: mptrain's own worker processes, or an external launcher.

Like nanoGPT (``RANK`` in the environment) and Lightning (``creates_processes_externally``),
a run started by torchrun is recognised from the variables torchrun sets; every such process
is one worker, mptrain starts none itself, and torch.distributed carries the collectives
(across nodes too). ``RANK`` and ``WORLD_SIZE`` alone are not enough: they are common
names, left behind by a shell or another tool, and torchrun mode joins a job over TCP.
torchrun always sets ``LOCAL_RANK`` and ``TORCHELASTIC_RUN_ID`` beside them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import UserError

#: Variables only a launcher of torchrun's kind sets; one of them must come with RANK and
#: WORLD_SIZE.
TORCHRUN_MARKERS = ("TORCHELASTIC_RUN_ID", "LOCAL_RANK")


@dataclass(frozen=True)
class ExternalWorld:
    rank: int
    world_size: int
    local_rank: int
    node: int = 0              # torchrun's GROUP_RANK: which node this rank runs on
    launcher: str = "torchrun"


def detect_external_world(environ=os.environ) -> ExternalWorld | None:
    """This process's place in a torchrun job, or None when torchrun did not start it."""
    if "RANK" not in environ or "WORLD_SIZE" not in environ:
        return None
    if not any(marker in environ for marker in TORCHRUN_MARKERS):
        return None
    world = ExternalWorld(rank=_number(environ, "RANK"),
                          world_size=_number(environ, "WORLD_SIZE"),
                          local_rank=_number(environ, "LOCAL_RANK", 0),
                          node=_number(environ, "GROUP_RANK", 0))
    if not 0 <= world.rank < world.world_size:
        raise UserError(f"RANK={world.rank} with WORLD_SIZE={world.world_size} in the "
                        "environment: not a rank of that job; start the command with torchrun")
    return world


def stray_rank_variables(environ=os.environ) -> str | None:
    """What to tell the user when RANK/WORLD_SIZE are set but torchrun's own variables are
    not (the run goes on with mptrain's own processes); None otherwise."""
    if detect_external_world(environ) is not None:
        return None
    stray = [name for name in ("RANK", "WORLD_SIZE") if name in environ]
    if not stray:
        return None
    return (f"{' and '.join(stray)} {'is' if len(stray) == 1 else 'are'} set in the "
            f"environment without torchrun's {' or '.join(TORCHRUN_MARKERS)}: not running "
            "as a torchrun rank (start the command with torchrun for that)")


def _number(environ, name: str, default: int | None = None) -> int:
    text = environ.get(name)
    if text is None and default is not None:
        return default
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise UserError(f"{name}={text!r} in the environment is not a number; torchrun sets "
                        "it, so start the command with torchrun") from None
    if value < 0:
        raise UserError(f"{name}={value} in the environment is negative; torchrun sets it, "
                        "so start the command with torchrun")
    return value
