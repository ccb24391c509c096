"""Synchronous parallel SGD / local SGD: train apart, average every N steps.

Each worker trains a private replica on its shard; every ``sync_every`` steps, and always at
the end of an epoch, all replicas are replaced by their average (parameters and floating
buffers). With ``sync_every=1`` and plain SGD this is exactly large-batch synchronous SGD:
averaging parameters after one SGD step from equal parameters equals one step with the
averaged gradient.

**Overlapped** (``sync_overlap``): averaging at a barrier makes every rank wait, every
period, for whichever rank the host slowed down that period; on a 2-vCPU VM a step of the
classic CNN varies by ~10% from one step to the next even alone, which costs ~6% of every
rank's time at a per-step barrier (``benchmarks/README.md``). Overlapped, each rank starts
averaging its update of the period (what it changed since the last averaging point) and
trains the next period before it collects that average, then swaps its own update for the
average: at any moment a replica is the common average plus this rank's not-yet-averaged
update of one period, and the average evolves exactly as synchronous averaging of the
ranks' updates. Each update is computed on a point one period behind the others' (one
period of staleness, as in Overlap Local-SGD, Wang et al. 2020, and CoCoD-SGD, Shen et al.
2019); a rank waits only when a peer is a whole period behind. The result does not depend
on timing (every rank waits for all contributions of a mean), and at the end of an epoch
the last average is collected and all replicas are averaged exactly, so epochs, checkpoints
and published models are as without overlap.

The averaging itself is a :class:`~mptrain.comm.Group` collective and the math lives in
``comm.reduce``; federated averaging reuses both, with clients simulated inside processes.
"""

from __future__ import annotations

import dataclasses
import functools

import torch

from ..errors import UserError
from .data_parallel import DataParallelStrategy, floating_state


class SyncStrategy(DataParallelStrategy):
    name = "sync"
    settings = DataParallelStrategy.settings | {"sync_every", "sync_overlap"}
    runs_under_torchrun = True
    ranks_take_turns = True

    def __init__(self, config):
        super().__init__(config)
        # Per rank: ranks that take turns in one process share this strategy object.
        self._overlaps: dict[int, OverlappedAverage] = {}

    @classmethod
    def recommended(cls, defaults):
        return defaults.common()   # the data set's averaging period included

    @classmethod
    def check_config(cls, config):
        if config.sync_overlap and config.sync_every is None:
            raise UserError("--sync-overlap needs an averaging period in steps: with one "
                            "average per epoch there is nothing to overlap; add "
                            "--sync-every N (e.g. 1)")

    def needs(self, model, data, plan):
        needs = super().needs(model, data, plan)
        if self.config.sync_overlap:
            needs = dataclasses.replace(needs, means_in_flight=True)
        return needs

    def comm_numel(self, model):
        return sum(t.numel() for t in floating_state(model))

    def begin_epoch(self, replica, group):
        if self.config.sync_overlap:
            self._overlaps[group.rank] = OverlappedAverage(floating_state(replica))

    def after_step(self, replica, group, step):
        if self.config.sync_every is not None and (step + 1) % self.config.sync_every == 0:
            if self.config.sync_overlap:
                self._overlaps[group.rank].exchange(group)
            else:
                group.average_(floating_state(replica))

    def end_epoch(self, replica, group, steps):
        every = self.config.sync_every
        overlap = self._overlaps.pop(group.rank, None)
        if overlap is not None:
            overlap.finish()
        if every is None or steps % every != 0 or overlap is not None:
            group.average_(floating_state(replica))

    def describe(self, plan, model):
        every = self.config.sync_every
        line = f"parameters averaged {f'every {every} steps' if every else 'once per epoch'}"
        if self.config.sync_overlap:
            line += (", each average collected one period later (overlapped: ranks do not "
                     "wait for each other every period)")
        return [line]


class OverlappedAverage:
    """One rank's side of overlapped averaging over one epoch (see the module doc), for the
    replica's ``tensors`` (the same tensors all epoch: optimizers update them in place).

    The snapshot is the replica at the last averaging point, after its correction: what the
    replica has changed since is this rank's update of the period. Flat buffers, views made
    once and ``_foreach`` kernels, because at a small model's scale the calls cost more
    than the arithmetic: an exchange of the classic CNN's 21,840 numbers (8 tensors) took
    ~0.3 ms tensor by tensor, against a ~10 ms step.
    """

    def __init__(self, tensors: list[torch.Tensor]):
        self._tensors = tensors
        dtype = functools.reduce(torch.promote_types, (t.dtype for t in tensors))
        self._snapshot, self._snapshot_views = self._flat(dtype)
        torch._foreach_copy_(self._snapshot_views, tensors)
        # Two update buffers: one is in flight (kept for its correction) while the next fills.
        self._updates = [self._flat(dtype) for _ in range(2)]
        self._correction, self._correction_views = self._flat(dtype)
        self._turn = 0
        self._in_flight: torch.Tensor | None = None   # this rank's part of the mean in flight
        self._pending = None

    @torch.no_grad()
    def exchange(self, group) -> None:
        """At an averaging point: collect the previous period's mean (swapping this rank's
        update of that period for it) and start averaging this period's update."""
        update, update_views = self._updates[self._turn]
        torch._foreach_copy_(update_views, self._tensors)
        update.sub_(self._snapshot)
        self.finish()
        torch._foreach_copy_(self._snapshot_views, self._tensors)
        self._pending = group.start_mean(update)
        self._in_flight = update
        self._turn ^= 1

    @torch.no_grad()
    def finish(self) -> None:
        """Collect the mean in flight, if any (at the end of an epoch: the last one)."""
        if self._pending is None:
            return
        torch.sub(self._pending.wait(), self._in_flight, out=self._correction)
        torch._foreach_add_(self._tensors, self._correction_views)
        self._pending = self._in_flight = None

    def _flat(self, dtype) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """A flat buffer for the tensors laid end to end in their logical order, and its
        views shaped like each of them."""
        tensors = self._tensors
        flat = torch.empty(sum(t.numel() for t in tensors), dtype=dtype,
                           device=tensors[0].device)
        views, offset = [], 0
        for tensor in tensors:
            views.append(flat[offset:offset + tensor.numel()].view(tensor.shape))
            offset += tensor.numel()
        return flat, views
