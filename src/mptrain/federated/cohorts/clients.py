"""A worker's share of a round's clients, trained in cohorts.

What each client reads and when it stops is the one-at-a-time path's: its seeded batch
order (``sampling.client_seed``), its step budget (``AvailabilityConfig.client_turn``).
Dropout draws come from a generator seeded per cohort (by the round and the cohort's
clients), so the same clients in the same cohorts draw the same masks in every run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import torch

from .. import availability
from ..client import full_steps, update_is_finite
from .trainer import CohortTrainer
from .batches import client_batches, stack_batches
from ..sampling import client_seed, mix_seed

_COHORT = 0x5EED_0008


@dataclass(frozen=True)
class ClientWork:
    """How one client trains in a round: the run's settings that decide its batches."""

    seed: int
    batch_size: int
    local_epochs: int
    #: Who straggles, and how far (the default: nobody; a personal loop's).
    availability: availability.AvailabilityConfig = availability.AvailabilityConfig()


@dataclass
class ClientOutcome:
    """One client's trained model (``pieces``: its slices of the stacked parameters, then
    the floating buffers) and what it did; ``finite``: whether every piece is finite (the
    cohort's verdict: ``is_finite`` says it of a flat copy)."""

    client: int
    pieces: list[torch.Tensor]
    steps: int
    samples: int
    loss_sum: float
    finite: bool

    def flat(self, out: torch.Tensor | None = None) -> torch.Tensor:
        """The model as one flat vector in host memory (where the server aggregates),
        written straight into ``out`` (its row of the round's table) when given: no
        cohort-sized copy, which in a worker would be a fresh mapping of pages every round
        (above glibc's mmap threshold)."""
        if self.pieces[0].device.type == "cpu":
            return torch.cat(self.pieces, out=out)
        flat = torch.cat(self.pieces)
        return flat.cpu() if out is None else out.copy_(flat)

    def is_finite(self, flat: torch.Tensor) -> bool:
        """Whether ``flat``, this client's ``flat()``, is all finite: the cohort's verdict,
        unless the copy changed the pieces' dtype -- a float64 model written into the
        float32 table turns a finite value beyond float32's range into an infinity -- then
        ``update_is_finite``'s look at the copy itself. (No cast makes a NaN or an infinity
        finite: a client the cohort found non-finite stays so.)"""
        if not self.finite:
            return False
        if all(piece.dtype == flat.dtype for piece in self.pieces):
            return True
        return update_is_finite(flat)


def cohort_seed(seed: int, round_index: int, clients: Sequence[int]) -> int:
    """The seed of a cohort's random masks (its network's dropout layers): its round and
    its clients, first and last and count."""
    return mix_seed(seed, round_index, clients[0], clients[-1], len(clients), _COHORT)


def split_into_cohorts(clients: Sequence[int], size: int) -> list[list[int]]:
    """``clients`` in order, in the fewest cohorts of at most ``size``, their sizes as even
    as can be: 50 clients at most 12 a cohort make 5 cohorts of 10, not 4 of 12 and one of
    2 -- a cohort's step costs its fixed dispatch whatever its size, and on a CPU a cohort
    of 2 trains barely faster than its clients one at a time."""
    count = math.ceil(len(clients) / size)
    if count == 0:
        return []
    base, extra = divmod(len(clients), count)
    cohorts, start = [], 0
    for i in range(count):
        end = start + base + (i < extra)
        cohorts.append(list(clients[start:end]))
        start = end
    return cohorts


def train_cohort(trainer: CohortTrainer, clients: Sequence[int], round_index: int,
                 work: ClientWork, rows: Sequence[torch.Tensor],
                 batch: Callable, global_params: Sequence[torch.Tensor], lr: float,
                 corrections: torch.Tensor | None = None,
                 on_step: Callable[[int], None] | None = None,
                 sampled: Sequence[int] = (),
                 starts: dict[int, torch.Tensor] | None = None,
                 frozen: Sequence[int] = ()) -> Iterator[ClientOutcome]:
    """Train ``clients`` together from the global model ``global_params``; yields each
    client's outcome in order. ``rows[k]``: the samples of ``clients[k]``, as indices that
    ``batch`` reads; ``sampled``: the round's clients, where they decide who straggles
    (``AvailabilityConfig.client_turn``). ``corrections``: SCAFFOLD's ``c - c_i``, a row
    per client; ``on_step(samples)``: progress after every step, and once, negative, if the
    cohort raises (what it counted is taken back: its clients are then trained again);
    ``starts``, ``frozen``: the clients' own starts of some parameters, and those that
    keep them (``CohortTrainer.train``)."""
    streams = []
    for client, indices in zip(clients, rows):
        full = full_steps(len(indices), work.batch_size, work.local_epochs)
        budget = work.availability.client_turn(round_index, client, full, sampled).budget
        generator = torch.Generator().manual_seed(client_seed(work.seed, round_index, client))
        streams.append(client_batches(indices, generator, work.batch_size,
                                      work.local_epochs, budget))
    batches = stack_batches(streams, work.batch_size)
    counted = 0

    def count(samples: int) -> None:
        nonlocal counted
        counted += samples
        on_step(samples)

    try:
        trained = trainer.train(batches, batch, global_params, corrections=corrections,
                                mask_seed=cohort_seed(work.seed, round_index, clients),
                                lr=lr, on_step=None if on_step is None else count,
                                starts=starts, frozen=frozen)
    except Exception:
        # A cohort that raises is retrained one client at a time, which counts its clients'
        # samples again: what this attempt counted is taken back, so that progress counts
        # each sample once (the parent's in-round count, the board's sum less what rounds
        # reported, would otherwise stay that much ahead for the rest of the run).
        if counted:
            on_step(-counted)
        raise
    buffers = [b.detach().reshape(-1) for b in trainer.model.buffers()
               if b.is_floating_point()]   # never changed by a cohort (``check``)
    buffers_finite = all(bool(torch.isfinite(b).all()) for b in buffers)
    for k, client in enumerate(clients):
        pieces = [p[k].reshape(-1) for p in trained.params] + buffers
        yield ClientOutcome(client, pieces, trained.steps[k], trained.samples[k],
                            trained.loss_sums[k], trained.finite[k] and buffers_finite)
