"""Synchronous parallel SGD / local SGD: train apart, average every N steps.

Each worker trains a private replica on its shard; every ``sync_every`` steps, and always at
the end of an epoch, all replicas are replaced by their average (parameters and floating
buffers). With ``sync_every=1`` and plain SGD this is exactly large-batch synchronous SGD:
averaging parameters after one SGD step from equal parameters equals one step with the
averaged gradient.

The averaging itself is a :class:`~mptrain.comm.Group` collective and the math lives in
``comm.reduce``; federated averaging reuses both, with clients simulated inside processes.
"""

from __future__ import annotations

from .epochs import EpochStrategy
from .model_state import floating_state


class SyncStrategy(EpochStrategy):
    name = "sync"
    settings = EpochStrategy.settings | {"sync_every", "drop_last"}
    runs_under_torchrun = True
    ranks_take_turns = True

    @classmethod
    def recommended(cls, defaults):
        return defaults.common()   # the data set's averaging period included

    def comm_numel(self, model):
        return sum(t.numel() for t in floating_state(model))

    def after_step(self, replica, group, step):
        if self.config.sync_every is not None and (step + 1) % self.config.sync_every == 0:
            group.average_(floating_state(replica))

    def end_epoch(self, replica, group, steps):
        every = self.config.sync_every
        if every is None or steps % every != 0:
            group.average_(floating_state(replica))

    def describe(self, plan, model):
        every = self.config.sync_every
        from ..report.words import count

        when = ("every step" if every == 1 else f"every {count(every, 'step')}") if every \
            else "once per epoch"
        return [f"parameters averaged {when}"]
