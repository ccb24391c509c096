"""DQN's replay buffer in shared memory: N actors fill it, one learner samples it, no locks.

Every environment step of a run has a number, its global step ``g``, and the actor that
takes it is fixed by that number: actor ``g % actors``, as its ``g // actors``-th step. Each
actor writes its steps into its own ring segment and counts them in its own counter; nobody
else writes either. The learner asks for rows by global step -- "uniformly from steps
``[first, end)``" -- so what it may draw is fixed by step counts, never by how far the
actors happen to be: with a seeded generator, the same draws give the same rows.

Why no lock is needed: the learner reads a global step only once its actor has counted it
(``rows_before``), and a row is written completely before its actor increments the counter.
On x86 (TSO) stores become visible in program order, so a counted row is whole. Weakly
ordered CPUs (aarch64, POWER) may show the counter before the row, so the learner also waits
until the actor has written a ``margin`` of further rows (see ``dqn``): a torn read would need
the row's stores to stay invisible while the actor takes that many more environment steps
and network evaluations -- a bound from the work involved, not a memory-model guarantee, the
same bargain as Hogwild's parameters. A ring segment is larger than its share of the
buffer's capacity by what an actor may run ahead of the learner (``ahead``), so no row the
learner may still draw is overwritten.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Batch:
    obs: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    next_obs: torch.Tensor
    dones: torch.Tensor        # 1.0 where the episode terminated (no bootstrap)
    # what the bootstrapped value is discounted by, per row (n-step returns: gamma ** k
    # for the k steps summed); None: gamma, one step
    discounts: torch.Tensor | None = None


def rows_before(step: int, actor: int, actors: int) -> int:
    """How many of the global steps before ``step`` belong to ``actor``."""
    return max(0, (step - actor + actors - 1) // actors)


def segment_rows(capacity: int, actors: int, ahead: int) -> int:
    """Rows of each actor's ring: its share of ``capacity`` global steps, plus the ``ahead``
    global steps that actors may run past the newest step the learner draws from."""
    return -(-(capacity + ahead) // actors) + 1


class SharedReplay:
    def __init__(self, obs: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor,
                 next_obs: torch.Tensor, dones: torch.Tensor, ends: torch.Tensor,
                 counts: torch.Tensor):
        self.obs, self.actions, self.rewards = obs, actions, rewards
        self.next_obs, self.dones, self.ends, self.counts = next_obs, dones, ends, counts
        self.actors = counts.numel()
        self.segment_size = obs.shape[0] // self.actors
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
    def create(cls, capacity: int, obs_dim: int, actors: int, ahead: int = 0) -> "SharedReplay":
        """Room for the newest ``capacity`` global steps, while actors may write up to
        ``ahead`` steps past the newest one drawn from."""
        rows = segment_rows(capacity, actors, ahead) * actors
        tensors = [torch.zeros(rows, obs_dim), torch.zeros(rows, dtype=torch.int64),
                   torch.zeros(rows), torch.zeros(rows, obs_dim), torch.zeros(rows),
                   torch.zeros(rows, dtype=torch.bool), torch.zeros(actors, dtype=torch.int64)]
        for tensor in tensors:  # before the views are taken: this moves the storage
            tensor.share_memory_()
        return cls(*tensors)

    @staticmethod
    def estimate_nbytes(capacity: int, obs_dim: int, actors: int, ahead: int = 0) -> int:
        rows = segment_rows(capacity, actors, ahead) * actors
        return rows * (2 * obs_dim * 4 + 8 + 4 + 4 + 1) + actors * 8

    def tensors(self) -> list[torch.Tensor]:
        return [self.obs, self.actions, self.rewards, self.next_obs, self.dones, self.ends,
                self.counts]

    def add(self, actor: int, obs, action: int, reward: float, next_obs, done: bool,
            ended: bool | None = None) -> None:
        """Append ``actor``'s next step to its segment (only that actor calls this).
        ``done``: the episode terminated (nothing to bootstrap from); ``ended``: it ended
        in any way, a time limit too (None: as ``done``) -- where n-step returns stop."""
        count = self.count(actor)
        obs_rows, actions, rewards, next_rows, dones, ends, counts = self._views
        row = actor * self.segment_size + count % self.segment_size
        obs_rows[row] = obs
        actions[row] = action
        rewards[row] = reward
        next_rows[row] = next_obs
        dones[row] = float(done)
        ends[row] = done if ended is None else ended
        counts[actor] = count + 1  # last: the row is complete before it is counted
        self._own_counts[actor] = count + 1

    def count(self, actor: int) -> int:
        """Steps ``actor`` has written; exact in the actor's own process."""
        own = self._own_counts.get(actor)
        return own if own is not None else int(self._views[-1][actor])

    def next_step(self, actor: int) -> int:
        """The global step ``actor`` takes next."""
        return self.count(actor) * self.actors + actor

    def total(self) -> int:
        """Transitions written by all actors so far."""
        return sum(self._views[-1].tolist())  # a few actors: faster than a NumPy sum

    def written(self, actor: int) -> int:
        """``actor``'s count as the other processes see it now."""
        return int(self._views[-1][actor])

    def sample(self, first: int, end: int, batch_size: int,
               generator: torch.Generator) -> Batch:
        """``batch_size`` transitions drawn uniformly from global steps ``[first, end)``;
        the caller has made sure they are written and not yet overwritten."""
        steps = torch.randint(first, end, (batch_size,), generator=generator)
        rows = self.rows_of(steps)
        return Batch(self.obs[rows], self.actions[rows], self.rewards[rows],
                     self.next_obs[rows], self.dones[rows])

    def rows_of(self, steps: torch.Tensor) -> torch.Tensor:
        """The rows that hold global steps ``steps`` (written, not yet overwritten)."""
        actor = steps % self.actors
        return actor * self.segment_size + (steps // self.actors) % self.segment_size

    def state(self) -> dict:
        """A copy of every row and counter (for a checkpoint)."""
        return {name: t.clone() for name, t in zip(_NAMES, self.tensors())}

    def load_state(self, state: dict) -> None:
        """Rows and counters from ``state``. A resumed run's actors start fresh episodes,
        so each actor's last row before it ends an episode (as a time limit does: its
        value still bootstraps). A checkpoint from before ``ends`` was kept has its ends
        found where a row's next observation is not the observation its actor's next
        row starts from."""
        for name, tensor in zip(_NAMES, self.tensors()):
            if name in state:
                tensor.copy_(state[name])
        if "ends" not in state:
            self.ends.copy_(self._ends_from_continuity())
        for actor, count in enumerate(self.counts.tolist()):
            if count:
                self.ends[actor * self.segment_size + (count - 1) % self.segment_size] = True
        self._own_counts.clear()  # the counters changed under them

    def _ends_from_continuity(self) -> torch.Tensor:
        shape = (self.actors, self.segment_size, self.obs.shape[1])
        following = self.obs.view(shape).roll(-1, dims=1)   # each ring's next row
        broken = (self.next_obs.view(shape) != following).any(-1).reshape(-1)
        return broken | (self.dones > 0)


_NAMES = ("obs", "actions", "rewards", "next_obs", "dones", "ends", "counts")
