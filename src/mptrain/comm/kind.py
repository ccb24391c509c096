"""How the ranks of a run talk, as one small value the rest of the house asks questions of
(instead of comparing strings): decided once when the run is planned."""

from __future__ import annotations

from enum import Enum


class CommKind(Enum):
    #: One process: nothing to talk to.
    NONE = "none"
    #: mptrain's own processes on one machine, through a shared-memory group.
    SHM = "shm"
    #: A flat torch.distributed group over gloo (CPU) or nccl (GPU).
    GLOO = "gloo"
    NCCL = "nccl"
    #: torchrun's CPU ranks: shared memory within each node, gloo between nodes.
    SHM_GLOO = "shm+gloo"

    @property
    def shares_memory(self) -> bool:
        """Whether every rank maps the same memory (the parent's tensors reach them all)."""
        return self in (CommKind.NONE, CommKind.SHM)

    @property
    def is_torch_group(self) -> bool:
        """A flat torch.distributed group: torch's own DDP can wrap the model."""
        return self in (CommKind.GLOO, CommKind.NCCL)

    @property
    def torch_backend(self) -> str | None:
        """The torch.distributed backend the job's default group uses, if any."""
        if self is CommKind.NCCL:
            return "nccl"
        if self in (CommKind.GLOO, CommKind.SHM_GLOO):
            return "gloo"
        return None

    def describe_for_launcher(self) -> str:
        """How the ranks an external launcher started talk, for the banner."""
        return {CommKind.GLOO: "gloo over every rank", CommKind.NCCL: "nccl over every rank",
                CommKind.SHM_GLOO: "shared memory within each node, gloo between nodes"
                }.get(self, self.value)
