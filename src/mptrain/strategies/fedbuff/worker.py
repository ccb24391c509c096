"""One fedbuff worker's program. Server step ``i`` reads top to bottom as the schedule says
(``federated.asynchronous.schedule``, computed by every process alike from the seed):

1. train my share of the clients that start from version ``i`` -- the global model as it is
   now -- one at a time or in stacked cohorts, as fedavg trains a round's; each client's
   change (its model minus version ``i``) goes into its row of the pending table, with its
   data weight (0: it failed or sent a non-finite update). With --personalize that trains
   personal state (FedPer, FedRep, FedBN, Ditto) each client starts from its own state and
   leaves it in the store as fedavg's clients do -- an update the server will drop as too
   stale (``--max-staleness``) trains too, for that state alone; every update of one
   client in a step is then one rank's, in dispatch order, never two in one cohort: a
   client drawn again before the step (a second update from the same version) starts from
   what its first left, whatever ``--workers`` is;
2. barrier; every rank combines its slice of the columns of the rows step ``i`` applies --
   updates trained at this step or earlier, each weighted by data and staleness, summed in
   arrival order -- and applies the server optimizer to its slice of the global model;
3. barrier: version ``i + 1`` is complete for everyone; every ``--client-eval-every``
   steps, each rank scores its slice of the clients on their own data (and with
   ``--personalize finetune:STEPS`` each fine-tuned first), as fedavg's rounds do.

Which process trains a client never changes what it computes (its seed is its version's and
its id's), and every sum runs in the schedule's order, so the same seed gives the bitwise
same model whatever ``--workers`` is. Who writes which row, and why no lock is needed, is
told in ``shared``.
"""

from __future__ import annotations

import math
import time

import torch.nn as nn

from ...errors import ClientFailedError
from ...errors import setting_name as named   # as the caller spelled the setting
from ...federated.aggregate import column_slice
from ...federated.asynchronous.buffer import buffer_coefficients, buffered_change
from ...federated.client import update_is_finite
from ...federated.cohorts.clients import split_into_cohorts
from ...federated.sampling import assign_clients
from ..base import RoundWork, WorkerProgram
from ..fedavg import train_evaluation
from ..fedavg.client_evaluation import ClientEvaluation
from ..fedavg.cohorts import CohortClients
from ..fedavg.personal_trainer import server_of, trainer_class
from ..fedavg.shared import FedAvgShared
from ..fedavg.tally import RoundTally
from ..model_state import copy_model_state
from . import checkpoint
from .clock import event_schedule, model_bytes_of
from .report import step_figures
from .settings import staleness_weight_of


class FedBuffProgram(WorkerProgram):
    """One worker: each server step, train my share of the clients starting from this
    version, then my slice of the buffer's step."""

    def __init__(self, config, shared: FedAvgShared, setup, client_path=None,
                 client_bytes=None):
        self.config, self.shared, self.setup = config, shared, setup
        self.group = setup.group
        self.trainer = trainer_class(config)(config, shared, setup, None)
        #: Whether clients keep personal state from one update to the next.
        self.keeps_personal = shared.personal is not None
        self.cohorts = CohortClients(config, shared, setup, self.trainer, None, client_path,
                                     client_bytes)
        self.client_evaluation = ClientEvaluation(config, shared, setup, self.trainer)
        self.server = server_of(config, self.trainer)
        self.weight = staleness_weight_of(config.fedavg)
        self.schedule = event_schedule(config, self.trainer.sizes,
                                       model_bytes_of(shared.global_flat.numel()))
        self.path_reported = False
        self.last_step = setup.start_round - 1   # the last step done (a checkpoint's)

    # -- one server step -------------------------------------------------------------------------
    def train_round(self, index: int) -> RoundWork:
        group, plan = self.group, self.schedule.plan(index)
        mine = step_share(self._updates_trained(plan), self.trainer.sizes, group.world_size,
                          group.rank, whole_clients=self.keeps_personal)
        started = time.monotonic()
        tally = RoundTally()
        first = not self.path_reported
        self.cohorts.agree(group)
        self._train(mine, index, tally)
        ended = time.monotonic()
        group.barrier()   # every row of the step written
        self._step(plan)
        group.barrier()   # every slice of version index + 1 written
        self.trainer.load_global()
        self.last_step = index
        extras = {"clients": len(mine), **tally.as_extras()}
        if train_evaluation.due(self.config, index):
            extras.update(train_evaluation.on_training_set(self.config, self.setup,
                                                           self.trainer))
        if self.client_evaluation.due(index):   # my clients of the step, once each
            extras.update(self.client_evaluation.run(
                list(dict.fromkeys(u.client for u in mine)), index))
        if group.rank == 0:
            extras.update(step_figures(plan))
            if first:
                extras["client_path"] = self.cohorts.path.describe()
        self.path_reported = True
        return RoundWork(steps=tally.steps, samples=tally.samples, loss_sum=tally.loss_sum,
                         started=started, ended=ended, extras=extras)

    def _updates_trained(self, plan) -> list:
        """The updates that start from this version and train: those the server will apply
        and -- when clients keep personal state, which keeps what they train -- those it
        will drop as too stale (no row), in dispatch order."""
        if not self.keeps_personal or not plan.trains_dropped:
            return list(plan.trains)
        return sorted(plan.trains + plan.trains_dropped, key=lambda u: u.number)

    def _train(self, updates, version: int, tally: RoundTally) -> None:
        """Train ``updates`` from the global model (version ``version``), each change into
        its row: in stacked cohorts where the path says so, else one at a time (and a
        cohort that raised, one at a time too, so that a failing client is named)."""
        path = self.cohorts.path
        groups = step_cohorts(updates, path.cohort_size, self.keeps_personal) \
            if path.vectorized else [[u] for u in updates]
        for cohort in groups:
            outcomes = None
            if path.vectorized:
                try:
                    outcomes = self.cohorts.train([u.client for u in cohort], version)
                except Exception as err:  # noqa: BLE001 - retried one by one, which reports it
                    tally.unstack(len(cohort), err)
            for position, update in enumerate(cohort):
                row = None if update.row is None else self.shared.table[update.row]
                if outcomes is None:
                    weight = self._train_one(update, version, row, tally)
                elif row is None:   # dropped: the cohort kept the client's state
                    outcome = outcomes[position]
                    weight = self._count_dropped(outcome.steps, outcome.samples,
                                                 outcome.loss_sum, tally)
                else:
                    outcome = outcomes[position]
                    result = outcome.flat(out=row)
                    weight = self._take(update, result, outcome.steps, outcome.samples,
                                        outcome.loss_sum, outcome.is_finite(result), tally)
                if row is not None:
                    self.shared.weights[update.row] = weight

    def _train_one(self, update, version: int, row, tally: RoundTally) -> float:
        trainer = self.trainer
        trainer.load_global()
        try:
            steps, samples, loss = trainer.train(update.client, version)
        except Exception as err:  # noqa: BLE001 - a client's failure is reported by id
            if not self.config.fedavg.accept_failures:
                raise ClientFailedError(
                    f"client {update.client} failed at server version {version} on worker "
                    f"rank {self.group.rank}: {type(err).__name__}: {err} "
                    f"({named('accept_failures')} drops failing clients instead)") from err
            tally.failed.append(update.client)
            return 0.0
        if row is None:   # dropped: trained for the client's own state (the trainer kept it)
            return self._count_dropped(steps, samples, loss, tally)
        result = trainer.flat_result(out=row)
        return self._take(update, result, steps, samples, loss, update_is_finite(result), tally)

    @staticmethod
    def _count_dropped(steps: int, samples: int, loss: float, tally: RoundTally) -> float:
        """An update the server will drop as too stale: its work counts, it weighs 0."""
        if math.isfinite(loss):
            tally.count(steps, samples, loss, partial=False)
        return 0.0

    def _take(self, update, result, steps: int, samples: int, loss: float, finite: bool,
              tally: RoundTally) -> float:
        """The trained model in ``result`` (its row) made the client's change; returns its
        data weight (0 when non-finite: dropped and counted, as fedavg does)."""
        if not (finite and math.isfinite(loss)):
            tally.nonfinite.append(update.client)
            return 0.0
        tally.count(steps, samples, loss, partial=False)
        tally.reported += 1
        result.sub_(self.shared.global_flat)
        return float(self.trainer.sizes[update.client] * self.config.fedavg.local_epochs)

    def _step(self, plan) -> None:
        """My slice of the server step: the buffer's change, then the server optimizer."""
        shared, group = self.shared, self.group
        rows = [u.row for u in plan.applies]
        coefficients = buffer_coefficients([float(shared.weights[r]) for r in rows],
                                           [u.staleness for u in plan.applies], self.weight)
        part = column_slice(shared.global_flat.numel(), group.world_size, group.rank)
        change = buffered_change(shared.table[rows, part], coefficients)
        if change is None:   # nothing in the buffer reported: the model stays
            return
        params = shared.global_flat[part]
        state = {name: tensor[part] for name, tensor in shared.server_state.items()}
        self.server.step_(params, params + change, state)

    # -- what the loop asks of every program -----------------------------------------------------
    def eval_model(self) -> nn.Module:
        return self.trainer.model

    def state(self) -> dict:
        if self.group.rank != 0:
            return {}
        return {**checkpoint.step_state(self.shared, self.trainer.model, self.schedule,
                                        self.last_step),
                **self.cohorts.state()}

    def load_state(self, state: dict) -> None:
        if self.group.rank == 0:   # the others read the shared state after the start line
            checkpoint.load_step_state(self.shared, state, self.schedule, self.last_step)
        self.cohorts.load_state(state)

    def publish(self, shared_model: nn.Module) -> None:
        if self.group.rank == 0:
            copy_model_state(self.trainer.model, shared_model)


def step_share(trains: list, sizes, world_size: int, rank: int, whole_clients: bool) -> list:
    """``rank``'s share of a step's updates, in the schedule's order, spread by data as
    fedavg spreads a round: positions stand for updates (a client may train twice from one
    version, when no other was free) -- or, ``whole_clients`` (personal state), a client
    stands for all of its updates, which one rank then trains in turn."""
    if not whole_clients:
        share = assign_clients(range(len(trains)), [sizes[u.client] for u in trains],
                               world_size)[rank]
        return [trains[p] for p in share]
    clients = list(dict.fromkeys(u.client for u in trains))
    load = [sizes[c] * sum(u.client == c for u in trains) for c in clients]
    chosen = {clients[p] for p in assign_clients(range(len(clients)), load, world_size)[rank]}
    return [u for u in trains if u.client in chosen]


def step_cohorts(updates: list, size: int, personal: bool) -> list[list]:
    """``updates`` in stacked cohorts of at most ``size``; with ``personal`` state cut first
    where a client comes again, so that its second update starts from what its first left
    (a cohort reads every client's state before it trains, and writes it after)."""
    if not personal:
        return split_into_cohorts(updates, size)
    runs, seen = [[]], set()
    for update in updates:
        if update.client in seen:
            runs.append([])
            seen = set()
        runs[-1].append(update)
        seen.add(update.client)
    return [cohort for run in runs for cohort in split_into_cohorts(run, size)]
