"""The network DQN's actors act with: versions the learner publishes into shared memory.

Version ``v`` is the learner's network once it has done every update due by global step
``(v + 1) * period``; the actors' steps of period ``c`` use version ``c - 2`` (the initial
network before that), so what an actor does at a step is fixed by the step's number, not by
how far the learner happens to be.

Two copies (slots) hold versions ``v`` and ``v - 1``; version ``v`` is written into the slot
of ``v - 2``. The learner publishes ``v`` only when every actor has written all its steps of
period ``v``, so no actor still reads version ``v - 2`` then (period ``v + 1`` uses ``v - 1``,
in the other slot). An actor waits until the version number -- one shared integer, written
by the learner after the copy -- says its version is there, then copies that slot into its
own network once per period. On weakly ordered CPUs an actor's last reads of a slot and its
next counter store may be reordered; the learner reads the counters before it overwrites
the slot, after which the actor would have to stay stalled a whole period of its steps:
again a bound from the work involved (as in ``replay``), not a memory-model guarantee.
"""

from __future__ import annotations

import torch
import torch.nn as nn


class PublishedPolicy:
    def __init__(self, slots: list[list[torch.Tensor]], version: torch.Tensor):
        self.slots = slots
        self.version = version    # the newest published version; written by the learner only

    @classmethod
    def create(cls, model: nn.Module) -> "PublishedPolicy":
        """Both slots hold the initial network (versions -2 and -1)."""
        slots = [[t.detach().clone().share_memory_() for t in model.state_dict().values()]
                 for _ in range(2)]
        return cls(slots, torch.full((1,), -1, dtype=torch.int64).share_memory_())

    @staticmethod
    def tensor_count(model: nn.Module) -> int:
        return 2 * len(model.state_dict()) + 1

    def newest(self) -> int:
        return int(self.version[0])

    @torch.no_grad()
    def publish(self, model: nn.Module, version: int) -> None:
        for slot, tensor in zip(self.slots[version % 2], model.state_dict().values()):
            slot.copy_(tensor)
        self.version[0] = version   # last: the copy is whole before it is announced

    @torch.no_grad()
    def load_into(self, model: nn.Module, version: int) -> None:
        """Copy version ``version`` (published, and not yet overwritten) into ``model``."""
        for tensor, slot in zip(model.state_dict().values(), self.slots[version % 2]):
            tensor.copy_(slot)

    def state(self) -> dict:
        return {"slots": [[t.clone() for t in slot] for slot in self.slots],
                "version": self.newest()}

    def load_state(self, state: dict) -> None:
        for mine, saved in zip(self.slots, state["slots"]):
            for tensor, value in zip(mine, saved):
                tensor.copy_(value)
        self.version[0] = state["version"]
