"""Collectives between the workers of one run: a small interface, three implementations.

- :class:`~.shm.ShmGroup`: our own processes on one machine; a shared-memory buffer and a
  barrier on process-shared semaphores that spins briefly (or yields, oversubscribed), then
  sleeps; no threads, no sockets (the fast path on CPU).
- :class:`~.dist.TorchDistGroup`: torch.distributed (gloo/nccl), for torchrun and several nodes.
- :class:`~.solo.SoloGroup`: one process; every collective is a no-op.

Strategies only see :class:`Group`, so the same ``sync`` or ``ddp`` code runs on all three.
"""

from .base import Group, CollectiveTimeout

__all__ = ["Group", "CollectiveTimeout"]
