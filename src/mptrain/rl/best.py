"""The best policy a run's evaluations found, kept beside the network that goes on training.

DQN on CartPole solves the task and then forgets it (docs/rl.md); a user handed the network
of the last step gets the forgotten policy. So every greedy evaluation (``base``'s
``GreedyEvaluation``) compares its mean return with the best so far, and when it is as good
or better, rank 0 copies the network into this shared-memory copy. The parent reads it once
the workers are gone and writes it as ``best.pt`` (and ``model.pt`` with ``keep="best"``).

Why no lock: rank 0 writes the copy only inside an evaluation, which every rank starts
after the round's barrier (``settles_first``) and no rank leaves before the barrier that
follows it; the parent reads it only after every worker has exited, and a process's exit
orders its writes before the parent's reads on every CPU.
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn as nn

from ..errors import UserError


class BestPolicy:
    """A copy of the network in shared memory: the policy of the best evaluation so far."""

    def __init__(self, tensors: list[torch.Tensor]):
        self.tensors = tensors

    @classmethod
    def create(cls, model: nn.Module) -> "BestPolicy":
        return cls([t.detach().clone().share_memory_() for t in model.state_dict().values()])

    @staticmethod
    def tensor_count(model: nn.Module) -> int:
        return len(model.state_dict())

    @staticmethod
    def nbytes(model: nn.Module) -> int:
        return sum(t.numel() * t.element_size() for t in model.state_dict().values())

    @torch.no_grad()
    def keep(self, model: nn.Module) -> None:
        """Copy ``model``'s state (nobody writes it during an evaluation) into the copy."""
        for kept, tensor in zip(self.tensors, model.state_dict().values()):
            kept.copy_(tensor)

    def network(self, like: nn.Module) -> nn.Module:
        """A new network shaped as ``like`` (the run's) holding the kept policy."""
        best = copy.deepcopy(like)
        best.load_state_dict(dict(zip(like.state_dict(), (t.clone() for t in self.tensors))))
        return best

    def state(self) -> dict:
        return {"tensors": [t.clone() for t in self.tensors]}

    @torch.no_grad()
    def load_state(self, state: dict) -> None:
        for mine, saved in zip(self.tensors, state["tensors"]):
            mine.copy_(saved)


class BestSoFar:
    """One rank's view of the best evaluation so far: its mean greedy return, the same on
    every rank (each computes it from the same all-reduce), and on rank 0 the kept policy."""

    def __init__(self, rank: int, policy: BestPolicy | None):
        self.rank, self.policy = rank, policy
        self.mean_return: float | None = None

    def would_keep(self, mean_return: float) -> bool:
        """Whether an evaluation of ``mean_return`` is at least the best so far."""
        return self.mean_return is None or mean_return >= self.mean_return

    def offer(self, mean_return: float, model: nn.Module) -> bool:
        """Keep ``model`` if ``mean_return`` is at least the best so far (a tie goes to the
        later policy: it trained longer, and a final policy that ties the best is then the
        kept one, not an older copy of the same score); whether it was kept."""
        if not self.would_keep(mean_return):
            return False
        self.mean_return = mean_return
        if self.rank == 0 and self.policy is not None:
            self.policy.keep(model)
        return True

    def state(self) -> dict:
        """This rank's part of a checkpoint (names no program's state uses)."""
        if self.mean_return is None:
            return {}
        state = {"best_return": self.mean_return}
        if self.rank == 0 and self.policy is not None:
            state["best_policy"] = self.policy.state()
        return state

    def load_state(self, state: dict) -> None:
        """Continue from a checkpoint's part; one written before best policies were kept
        has none, and the first evaluation after the resume is the best so far."""
        self.mean_return = state.get("best_return")
        if self.rank == 0 and self.policy is not None and "best_policy" in state:
            self.policy.load_state(state["best_policy"])


def check_best_state(checkpoint, model: nn.Module) -> None:
    """Refuse, in one line, a checkpoint whose best-so-far parts (``BestSoFar.state``) a
    worker could not load into ``model``'s shapes: loaded there, a damaged file crashed
    every worker with a traceback, after the processes had started."""
    own = list(model.state_dict().values())
    for rank, part in enumerate(checkpoint.ranks):
        fault = _best_fault(part, own)
        if fault:
            raise UserError(f"{checkpoint.source or 'the checkpoint'} is damaged (the best "
                            f"evaluated policy of rank {rank}: {fault}); use another "
                            "checkpoint")


def _best_fault(part: dict, own: list[torch.Tensor]) -> str | None:
    best = part.get("best_return")
    if best is not None and (isinstance(best, bool) or not isinstance(best, (int, float))):
        return f"its best return is {type(best).__name__}, not a number"
    if best is not None and math.isnan(best):
        return "its best return is nan"
    if "best_policy" not in part:
        return None
    policy = part["best_policy"]
    tensors = policy.get("tensors") if isinstance(policy, dict) else None
    if not isinstance(tensors, list):
        return "no list of tensors"
    if len(tensors) != len(own):
        return f"{len(tensors)} tensors for the network's {len(own)}"
    for at, (saved, mine) in enumerate(zip(tensors, own), start=1):
        where = f"tensor {at} of {len(own)}"
        if not isinstance(saved, torch.Tensor):
            return f"{where} is {type(saved).__name__}"
        if saved.shape != mine.shape:
            return f"{where} has shape {tuple(saved.shape)}, the network's {tuple(mine.shape)}"
        if saved.dtype != mine.dtype:
            return f"{where} is {saved.dtype}, the network's {mine.dtype}"
    return None
