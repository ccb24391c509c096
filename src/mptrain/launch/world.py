"""Where ranks come from: mptrain's own worker processes, or an external launcher.

Like nanoGPT (``RANK`` in the environment) and Lightning (``creates_processes_externally``),
a run started by torchrun is recognised from the variables torchrun sets; every such process
is one worker, mptrain starts none itself, and torch.distributed carries the collectives
(across nodes too).
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class ExternalWorld:
    rank: int
    world_size: int
    local_rank: int
    node: int = 0              # torchrun's GROUP_RANK: which node this rank runs on
    launcher: str = "torchrun"


def detect_external_world(environ=os.environ) -> ExternalWorld | None:
    if "RANK" not in environ or "WORLD_SIZE" not in environ:
        return None
    return ExternalWorld(rank=int(environ["RANK"]), world_size=int(environ["WORLD_SIZE"]),
                         local_rank=int(environ.get("LOCAL_RANK", 0)),
                         node=int(environ.get("GROUP_RANK", 0)))
