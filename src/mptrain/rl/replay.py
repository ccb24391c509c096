"""A replay buffer in shared memory that N actors fill and one learner samples, no locks.

The buffer is split into one ring segment per actor, and each actor is the only writer of
its segment and of its own counter (transitions written so far, ever). The learner reads
the counters and samples rows from the filled part of every segment.

Why no lock is needed: a row is written completely before its actor increments the
counter. On x86 (TSO) stores become visible in program order, so a row is whole whenever
the counter says it exists. Weakly ordered CPUs (aarch64, POWER) may show the counter
before the row, and a ring overwrites its oldest row while the learner may read it. So the
learner never samples the ``margin`` newest rows nor the ``margin`` oldest of a segment: a
torn read would need an actor to write ``margin`` (64) transitions -- 64 environment steps
and network evaluations, tens of microseconds each -- while the learner gathers one batch
(a few microseconds). That is a bound from the work involved, not a memory-model guarantee,
and it is the same bargain as Hogwild's parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

MARGIN = 64


@dataclass
class Batch:
    obs: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    next_obs: torch.Tensor
    dones: torch.Tensor        # 1.0 where the episode terminated (no bootstrap)


class SharedReplay:
    def __init__(self, obs: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor,
                 next_obs: torch.Tensor, dones: torch.Tensor, counts: torch.Tensor,
                 margin: int = MARGIN):
        self.obs, self.actions, self.rewards = obs, actions, rewards
        self.next_obs, self.dones, self.counts = next_obs, dones, counts
        self.segments = counts.numel()
        self.segment_size = obs.shape[0] // self.segments
        self.margin = margin
        self._bind()

    def _bind(self) -> None:
        """NumPy views of the tensors, for ``add`` (a row store through a view costs a
        fraction of a tensor index store), and this process's own counts. Built on the
        tensors' current storage, so again after unpickling (spawn) and after the tensors
        move to shared memory; never pickled themselves, as a pickled array is a copy."""
        self._views = [t.numpy() for t in self.tensors()]
        # Each actor is the only writer of its counter, so its count as a Python int, read
        # from the shared counter on its first add, stays right: nobody else changes it.
        self._own_counts: dict[int, int] = {}

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        del state["_views"], state["_own_counts"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._bind()

    @classmethod
    def create(cls, capacity: int, obs_dim: int, actors: int,
               margin: int = MARGIN) -> "SharedReplay":
        """``capacity`` transitions in total, ``capacity // actors`` per actor's segment."""
        per = capacity // actors
        if per <= 2 * margin:
            raise ValueError(f"a replay buffer of {capacity} for {actors} actors leaves "
                             f"{per} rows per actor; need more than {2 * margin}")
        rows = per * actors
        tensors = [torch.zeros(rows, obs_dim), torch.zeros(rows, dtype=torch.int64),
                   torch.zeros(rows), torch.zeros(rows, obs_dim), torch.zeros(rows),
                   torch.zeros(actors, dtype=torch.int64)]
        for tensor in tensors:  # before the views are taken: this moves the storage
            tensor.share_memory_()
        return cls(*tensors, margin)

    @staticmethod
    def estimate_nbytes(capacity: int, obs_dim: int, actors: int) -> int:
        rows = capacity // actors * actors
        return rows * (2 * obs_dim * 4 + 8 + 4 + 4) + actors * 8

    def tensors(self) -> list[torch.Tensor]:
        return [self.obs, self.actions, self.rewards, self.next_obs, self.dones, self.counts]

    def add(self, actor: int, obs, action: int, reward: float, next_obs, done: bool) -> None:
        """Append one transition to ``actor``'s segment (only that actor calls this)."""
        count = self._own_counts.get(actor)
        if count is None:
            count = int(self.counts[actor])
        obs_rows, actions, rewards, next_rows, dones, counts = self._views
        row = actor * self.segment_size + count % self.segment_size
        obs_rows[row] = obs
        actions[row] = action
        rewards[row] = reward
        next_rows[row] = next_obs
        dones[row] = float(done)
        counts[actor] = count + 1  # last: the row is complete before it is counted
        self._own_counts[actor] = count + 1

    def total(self) -> int:
        """Transitions written by all actors so far."""
        return sum(self._views[-1].tolist())  # a few actors: faster than a NumPy sum

    def sampleable(self) -> list[tuple[int, int]]:
        """Per segment, the (first, end) positions -- in that actor's count of writes -- that
        the learner may read: filled, past the newest ``margin`` rows and clear of the
        ``margin`` oldest, which the next writes will overwrite."""
        ranges = []
        for count in self.counts.tolist():
            end = count - self.margin
            first = max(0, count - self.segment_size + self.margin)
            ranges.append((first, max(first, end)))
        return ranges

    def sample(self, batch_size: int, generator: torch.Generator) -> Batch | None:
        """``batch_size`` transitions drawn uniformly from every actor's readable rows (None
        while there are none)."""
        ranges = self.sampleable()
        sizes = torch.tensor([end - first for first, end in ranges], dtype=torch.float64)
        available = int(sizes.sum())
        if available == 0:
            return None
        # Uniform over all readable rows: a position among them, then its segment.
        picks = torch.randint(available, (batch_size,), generator=generator)
        bounds = sizes.cumsum(0).to(torch.int64)
        segment = torch.searchsorted(bounds, picks, right=True)
        offset = picks - (bounds[segment] - sizes.to(torch.int64)[segment])
        firsts = torch.tensor([first for first, _ in ranges], dtype=torch.int64)
        position = firsts[segment] + offset
        rows = segment * self.segment_size + position % self.segment_size
        return Batch(self.obs[rows], self.actions[rows], self.rewards[rows],
                     self.next_obs[rows], self.dones[rows])

    def state(self) -> dict:
        """A copy of every row and counter (for a checkpoint)."""
        return {name: t.clone() for name, t in zip(_NAMES, self.tensors())}

    def load_state(self, state: dict) -> None:
        for name, tensor in zip(_NAMES, self.tensors()):
            tensor.copy_(state[name])
        self._own_counts.clear()  # the counters changed under them


_NAMES = ("obs", "actions", "rewards", "next_obs", "dones", "counts")
