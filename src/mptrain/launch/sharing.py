"""How tensors are shared between processes, and whether /dev/shm can hold them.

torch.multiprocessing has two sharing strategies on Linux:
- ``file_descriptor`` (default): each shared storage is an unlinked shm segment kept alive by
  an open file descriptor. Nothing can leak in /dev/shm, but every shared tensor costs one
  descriptor in every process holding it: thousands of tensors hit "Too many open files".
- ``file_system``: segments are named files in /dev/shm, tracked by torch_shm_manager, which
  unlinks them when the last process using them is gone. No descriptor per tensor, but a
  SIGKILLed manager leaves files behind (``mptrain doctor --clean`` removes those of dead
  runs).

``auto`` first raises the soft open-file limit to the hard limit, then keeps
``file_descriptor`` when the tensors fit comfortably in that limit.
"""

from __future__ import annotations

import resource

import torch.multiprocessing as torch_mp

# The check that /dev/shm holds what will be written there lives with the shared data (the
# natural data readers, below this room, check it as they load); the plan imports it here.
from ..data.shm_space import SHM_PATH, check_shm_space  # noqa: F401
from ..errors import UserError
from ..errors import setting_name as named   # as the caller spelled the setting

# Descriptors the process needs for everything else (pipes, libraries, files, sockets).
_DESCRIPTOR_HEADROOM = 512


def raise_open_file_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit; return the new (soft, hard)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard_target = max(soft, 1 << 20) if soft != resource.RLIM_INFINITY else soft
    else:
        hard_target = hard
    if soft != resource.RLIM_INFINITY and soft < hard_target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard_target, hard))
            soft = hard_target
        except (ValueError, OSError):
            pass
    return soft, hard


def choose_sharing_strategy(requested: str, shared_tensors: int) -> tuple[str, str]:
    """Return ``(strategy, reason)`` and make it torch's current strategy."""
    available = torch_mp.get_all_sharing_strategies()
    if requested != "auto" and requested not in available:
        raise UserError(f"sharing strategy {requested!r} is not available here; choose "
                        f"one of: auto, {', '.join(sorted(available))}")
    soft, _ = raise_open_file_limit()
    needed = shared_tensors + _DESCRIPTOR_HEADROOM
    if requested == "file_descriptor" and soft != resource.RLIM_INFINITY and needed > soft:
        sharing = named("sharing_strategy")
        raise UserError(f"{sharing} file_descriptor needs about {needed} open files "
                        f"for {shared_tensors} shared tensors but the limit is {soft}; use "
                        f"{sharing} auto (or file_system), or raise the hard limit "
                        "(ulimit -Hn)")
    if requested != "auto":
        torch_mp.set_sharing_strategy(requested)
        return requested, "as requested"
    if "file_descriptor" in available and (soft == resource.RLIM_INFINITY or needed <= soft):
        strategy = "file_descriptor"
        reason = f"{shared_tensors} shared tensors fit the open-file limit {soft}; nothing " \
                 "can leak in /dev/shm"
    elif "file_system" in available:
        strategy = "file_system"
        reason = f"{shared_tensors} shared tensors would exceed the open-file limit {soft}"
    else:
        strategy = next(iter(available))
        reason = "the only strategy this platform has"
    torch_mp.set_sharing_strategy(strategy)
    return strategy, reason
