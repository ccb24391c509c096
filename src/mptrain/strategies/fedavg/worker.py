"""One fedavg worker's program. A round reads top to bottom as the algorithm does:

1. sample the round's clients (fixed-size, or Poisson with DP; on the virtual clock those
   that report in time: ``virtual_clock``) and take my share of them;
2. train each from the global model (``train_my_clients``) -- FedProx's or SCAFFOLD's
   correction, stragglers doing part of their steps -- and put its result in its row of the
   shared table, unless it dropped out, failed or sent a non-finite update (then its row
   weighs 0); with DP the row is the client's update clipped to the clip;
3. barrier; aggregate my slice of the columns (``server.combine_updates``: weighted mean, or
   with DP the sum plus noise over the expected count) and apply the server optimizer to my
   slice of the global model; SCAFFOLD's ``c`` moves by the clients' ``dc_i``; rank 0 also
   updates the adaptive clip and the privacy spent. Under torchrun, with no shared table,
   the ranks combine their own clients' means through the group, or for a robust rule
   gather their rows to rank 0 (``gathered``), which applies the rule for all;
4. barrier; every N rounds, evaluate the global model on each client's own data (its test
   split where it has one; ``client_evaluation``).

Shared state without locks, and why it is safe: a row of the table, of ``dc`` and of the
client variates is written by the one worker that trains that client in the round; the
global model, the server state and ``c`` are written only between the two barriers, each
column by one rank, and read by others only after the second; the clip and the privacy cell
are written by rank 0 between the barriers and read after the next barrier (each rank keeps
the round's clip from before the first). The barriers of the shared-memory group order the
writes before them with the reads after them on every CPU (they are built on a lock and a
condition, which are full memory barriers, also on aarch64).
"""

from __future__ import annotations

import math
import time

import torch
import torch.nn as nn

from ...errors import ClientFailedError
from ...errors import setting_name as named   # as the caller spelled the setting
from ...federated import scaffold
from ...federated.client import update_is_finite
from ...federated.cohorts.clients import split_into_cohorts
from ...federated.privacy import clip_
from ...federated.sampling import assign_clients
from ..base import RoundWork, WorkerProgram
from ..model_state import copy_model_state
from . import checkpoint, train_evaluation
from .client_evaluation import ClientEvaluation
from .cohorts import CohortClients
from .gathered import GatheredTable, slot_owners
from .personal_trainer import held_columns, server_of, trainer_class
from .robust_worker import RobustWorker
from .server import ServerStep
from .settings import accountant_name, robust_settings_of
from .shared import FedAvgShared
from .tally import RoundTally
from .virtual_clock import RoundSampler


class FedAvgProgram(WorkerProgram):
    """One worker: each round, train my share of the sampled clients, then aggregate."""

    def __init__(self, config, shared: FedAvgShared, setup, client_path=None,
                 client_bytes=None):
        self.config, self.shared, self.setup = config, shared, setup
        self.group = setup.group
        self.client_controls = shared.client_controls()   # mapped once per process
        self.trainer = trainer_class(config)(config, shared, setup, self.client_controls)
        # The stacked path (--vectorize-clients), as the parent chose it; the cohort size is
        # agreed in the first round.
        self.cohorts = CohortClients(config, shared, setup, self.trainer,
                                     self.client_controls, client_path, client_bytes)
        self.path_reported = False
        self.client_evaluation = ClientEvaluation(config, shared, setup, self.trainer)
        accountant = None
        if config.fedavg.private:
            from ...federated.accounting import PrivacyAccountant

            accountant = PrivacyAccountant(accountant_name(config.fedavg))
        # The rule and the attackers (None: FedAvg's mean, nobody attacks).
        settings = robust_settings_of(config)
        self.robust = RobustWorker(settings, shared.decision_cell, config.seed,
                                   setup.data.output_size, held_columns(self.trainer)) \
            if settings.active else None
        self.server = ServerStep(config, shared, self.group, server_of(config, self.trainer),
                                 accountant, self.robust)
        # Without shared memory (torchrun) the rule needs the rows gathered to rank 0.
        self.gathered = GatheredTable(self.group.rank, shared.rows,
                                      shared.global_flat.numel()) \
            if self.robust is not None and not shared.shared_table else None
        #: Rounds the rule skipped (too few reports for its F), since the run began:
        #: rank 0's count, carried in its checkpoint part.
        self.rounds_skipped = 0
        flat = shared.global_flat   # what a client downloads and uploads, for the clock
        self.sampler = RoundSampler(config, self.trainer.sizes, shared.rows,
                                    flat.numel() * flat.element_size())

    # -- one round -------------------------------------------------------------------------------
    def train_round(self, round_index: int) -> RoundWork:
        group, shared = self.group, self.shared
        sampled = self.sampler.sample(round_index)
        assignment = assign_clients(sampled, self.trainer.sizes, group.world_size)
        mine = assignment[group.rank]
        owners = slot_owners(sampled, assignment)
        if self.gathered is not None:
            self.gathered.start_round([slot for slot, rank in enumerate(owners)
                                       if rank == group.rank])
        clip = float(shared.clip[0]) if shared.clip is not None else None
        started = time.monotonic()
        tally = RoundTally()
        first = not self.path_reported
        self.cohorts.agree(group)
        partial_sum, partial_weight = self.train_my_clients(mine, sampled, round_index,
                                                            clip, tally)
        ended = time.monotonic()
        figures = {}
        if shared.shared_table:
            figures = self.server.reduce_shared_table(round_index, sampled, clip)
        elif self.gathered is not None:
            figures = self.server.reduce_gathered(self.gathered, sampled, owners)
        else:
            self.server.reduce_through_group(partial_sum, partial_weight)
        if figures.get("skipped"):
            self.rounds_skipped += 1
        if group.rank == 0:
            figures.update(self.sampler.figures)   # the virtual clock's, if any
            if self.robust is not None:
                figures["rounds_skipped"] = self.rounds_skipped
        self.trainer.load_global()
        if train_evaluation.due(self.config, round_index):
            figures.update(train_evaluation.on_training_set(self.config, self.setup, self.trainer))
        if self.client_evaluation.due(round_index):
            figures.update(self.client_evaluation.run(mine, round_index))
        extras = {"clients": len(mine), **tally.as_extras(), **figures}
        if first and group.rank == 0:   # the path this run's clients train on, once
            extras["client_path"] = self.cohorts.path.describe()
        self.path_reported = True
        return RoundWork(steps=tally.steps, samples=tally.samples, loss_sum=tally.loss_sum,
                         started=started, ended=ended, extras=extras,
                         last=bool(figures.get("privacy_stop")) if group.rank == 0
                         else self.server.privacy_stop())

    def train_my_clients(self, mine: list[int], sampled: list[int], round_index: int,
                         clip: float | None, tally: "RoundTally"):
        """Train this worker's share of the round's clients, each from the global model --
        one after another, or in stacked cohorts (``cohorts``) -- each result into its row
        of the round's table (shared, or ``gathered`` to rank 0) with its weight, or
        without a table into this worker's weighted sum. Returns that sum and its weight
        (None, 0.0 with a table)."""
        shared = self.shared
        slots = {client: slot for slot, client in enumerate(sampled)}
        partial_sum, partial_weight = None, 0.0
        path = self.cohorts.path
        # In training order: (clients, stacked) -- the honest clients' cohorts, then the
        # attackers one at a time (the one-client path has the attack's hooks: they train,
        # forge or flip labels there); or, one client at a time, every client alone.
        if path.vectorized:
            robust = self.robust
            attackers = [c for c in mine if robust is not None and robust.is_malicious(c)]
            unheard = [c for c in mine if robust is None and self.trainer.unheard(c, round_index)]
            honest = [c for c in mine if c not in attackers and c not in unheard]
            order = [(cohort, True) for cohort in split_into_cohorts(honest, path.cohort_size)]
            order += [([c], False) for c in attackers + unheard]
        else:
            order = [([c], False) for c in mine]
        for clients, stacked in order:
            outcomes = self._train_cohort(clients, round_index, tally) if stacked else None
            for position, client in enumerate(clients):
                row = self._row(slots[client])
                if outcomes is None:
                    weight = self._run_client(client, round_index, clip, row,
                                              slots[client], tally)
                    result = None if row is not None or not weight else \
                        self.trainer.flat_result()
                else:
                    outcome = outcomes[position]
                    result = outcome.flat(out=row)
                    weight = self._take_result(client, round_index, clip, result,
                                               outcome.steps, outcome.samples,
                                               outcome.loss_sum, slots[client], tally,
                                               finite=outcome.is_finite(result))
                if shared.shared_table:
                    shared.weights[slots[client]] = weight
                elif self.gathered is not None:
                    self.gathered.weights[slots[client]] = weight
                elif weight:
                    partial_sum = result * weight if partial_sum is None else \
                        partial_sum.add_(result, alpha=weight)
                    partial_weight += weight
        return partial_sum, partial_weight

    def _row(self, slot: int) -> torch.Tensor | None:
        """Where the client of ``slot`` puts its result: its row of the shared table, or
        of this rank's gathered rows; None when the rank sums its clients itself."""
        if self.shared.shared_table:
            return self.shared.table[slot]
        if self.gathered is not None:
            return self.gathered.row(slot)
        return None

    def _train_cohort(self, cohort: list[int], round_index: int, tally: "RoundTally"):
        """The cohort's outcomes, or None when it raised: its clients are then trained one
        at a time, so that a failing client is named (and with --accept-failures dropped
        alone), and the round says so (a cohort too large for the GPU would otherwise
        train every round one client at a time under a summary that says 'vectorized')."""
        try:
            return self.cohorts.train(cohort, round_index)
        except Exception as err:  # noqa: BLE001 - retried client by client, which reports it
            tally.unstack(len(cohort), err)
            return None

    def _run_client(self, client: int, round_index: int, clip: float | None,
                    row: torch.Tensor | None, slot: int, tally: "RoundTally") -> float:
        """Train ``client``, put its result in ``row``; returns its weight in the aggregate
        (0: it dropped out, failed or sent a non-finite update)."""
        f, trainer, robust = self.config.fedavg, self.trainer, self.robust
        if robust is None and trainer.unheard(client, round_index):
            return tally.unheard()
        trainer.load_global()
        if robust is not None and not robust.trains(client):
            return robust.forge(client, row, self.shared.global_flat, round_index, tally,
                                f.dropout_rate, self.trainer.sizes[client] * f.local_epochs)
        try:
            relabel = robust.targets(client) if robust is not None else None
            steps, samples, loss = trainer.train(client, round_index, relabel)
        except Exception as err:  # noqa: BLE001 - a client's failure is reported by id
            if not f.accept_failures:
                raise ClientFailedError(
                    f"client {client} failed in round {round_index + 1} on worker rank "
                    f"{self.group.rank}: {type(err).__name__}: {err} "
                    f"({named('accept_failures')} drops failing clients from their round "
                    "instead)") from err
            tally.failed.append(client)
            return 0.0
        result = trainer.flat_result(out=row)
        if robust is not None:   # an attacker's update replaces its honest one
            robust.send_(client, result, self.shared.global_flat, round_index)
        return self._take_result(client, round_index, clip, result, steps, samples, loss,
                                 slot, tally)

    def _take_result(self, client: int, round_index: int, clip: float | None,
                     result: torch.Tensor, steps: int, samples: int, loss: float,
                     slot: int, tally: "RoundTally", finite: bool | None = None) -> float:
        """What becomes of a trained client's flat ``result`` (its row): dropped when
        non-finite or out, SCAFFOLD's variate updated, clipped with DP; returns its
        weight. ``finite``: whether ``result`` is, where a cohort already knows."""
        f, shared, trainer = self.config.fedavg, self.shared, self.trainer
        if not (math.isfinite(loss)
                and (update_is_finite(result) if finite is None else finite)):
            # Dropped and counted, and its loss kept out of the round's: one bad client is
            # not the run diverging.
            tally.nonfinite.append(client)
            return 0.0
        turn = trainer.turn(client, round_index)
        tally.count(steps, samples, loss, partial=turn.straggles)
        if not turn.reports:
            # Trained, never reported (or, FedAvg as FedProx's paper runs it, a straggler
            # whose partial work the server will not wait for): nothing of it is kept.
            tally.dropped += 1
            return 0.0
        tally.reported += 1
        if f.scaffold:
            p = trainer.param_numel
            scaffold.update_client_control_(
                self.client_controls[client], shared.controls, shared.global_flat[:p],
                result[:p], steps, trainer.client_lr(round_index),
                delta_out=shared.control_deltas[slot])
            shared.touched[client] = 1
        # Weighted by its data (FedAvg's and FedProx's n_k), not by the samples it got
        # through: a straggler's partial work counts as much as a full client's.
        weight = float(trainer.sizes[client] * f.local_epochs)
        if clip is None:
            return weight
        # Clipping is the client's: the server only ever sees a bounded update.
        result.sub_(shared.global_flat)
        norm = clip_(result, clip)
        shared.within[slot] = 1.0 if norm <= clip else 0.0
        return 1.0 if f.private else weight

    # -- what the loop asks of every program -----------------------------------------------------
    def eval_model(self) -> nn.Module:
        return self.trainer.model

    def state(self) -> dict:
        state = checkpoint.server_state(self.shared, self.group.rank, self.trainer.model,
                                        self.server.accountant, self.client_controls)
        if self.group.rank == 0:
            state.update(self.cohorts.state())
            if self.robust is not None:
                state["rounds_skipped"] = self.rounds_skipped
        return state

    def load_state(self, state: dict) -> None:
        checkpoint.load_server_state(self.shared, state, self.server.accountant,
                                     self.client_controls)
        self.cohorts.load_state(state)
        # Checkpoints before the count was kept have none: counted from the resume on.
        self.rounds_skipped = int(state.get("rounds_skipped", 0))

    def publish(self, shared_model: nn.Module) -> None:
        if self.group.rank == 0:
            copy_model_state(self.trainer.model, shared_model)
