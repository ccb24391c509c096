"""The group of one: what the ``single`` strategy and world size 1 use."""

from .base import Group


class SoloGroup(Group):
    rank = 0
    world_size = 1

    def barrier(self):
        pass

    def average_(self, tensors):
        pass

    def broadcast_(self, tensors, src=0):
        pass


class SoloSpec:
    """Picklable recipe for a group of one."""

    def attach(self, rank: int, progress=None) -> SoloGroup:
        return SoloGroup()

    def release(self) -> None:
        """A group of one holds nothing."""
