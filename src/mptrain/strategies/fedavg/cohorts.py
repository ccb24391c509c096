"""fedavg's stacked path (``--vectorize-clients``): the parent's check of the model and
choice of path before anything starts, and a worker's cohorts -- their size, agreed by
every rank in the first round, and the training of one cohort.

The parent dry-runs the model on one batch on CPU (``federated.cohorts.check``): ``on``
refuses there what cannot vectorize, ``auto`` notes it and trains one client at a time, or
applies its rule (``federated.cohorts.choice``). On CPU the parent also sizes the cohorts
(the size the banner shows); on a GPU each worker sizes them from the memory free on its
device in its first round. Either way rank 0's size goes to every rank (``broadcast_``),
and a checkpoint keeps it, so a resumed run trains in the cohorts of the run it continues.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from ...errors import UserError
from ...errors import setting_name as named   # as the caller spelled the setting
from ...federated import scaffold
from ...federated.availability import AvailabilityConfig
from ...federated.cohorts.choice import ClientPath, as_tensor, auto_path, vectorizing
from ...federated.cohorts.clients import ClientOutcome, ClientWork, train_cohort
from ...federated.cohorts.check import CohortCheck, check_cohort
from ...federated.cohorts.memory import cohort_size, memory_budget
from .personal_cohorts import DittoCohort, FedRepCohort, fedavg_starts, keep_personal
from .personal_setup import one_at_a_time_reason
from .cohort_trainer import cohort_trainer
from .shared import table_rows


def choose_path(config, model, data, workers: int) -> tuple[CohortCheck | None, ClientPath]:
    """The parent's dry run (None with ``off``) and the path the clients will train on;
    ``on`` refuses a model that cannot vectorize, in one line naming the module."""
    f = config.fedavg
    mode = f.vectorize_clients
    if mode == "off":
        return None, ClientPath(False, reason=vectorizing("off"))
    personal = one_at_a_time_reason(config, model)
    if personal is not None:
        if mode == "on":
            raise UserError(f"{vectorizing('on')}: {personal}")
        return None, ClientPath(False, reason=personal)
    if config.augment or config.transform or config.collate:   # per client's batch
        said = next(k for k in ("augment", "transform", "collate") if getattr(config, k))
        reason = f"{named(said)} works on one client's batches at a time"
        if mode == "on":
            raise UserError(f"{vectorizing('on')}: {reason}")
        return None, ClientPath(False, reason=reason)
    if config.compile:   # stacked clients run through torch.func, not the compiled model
        return None, ClientPath(False, reason=f"{named('compile')} compiles the one-client "
                                              "model")
    count = min(len(data.train), config.batch_size)
    # head(): a data set still to be built in shared memory is not built here for it
    inputs, targets = data.train.head(count), data.train.targets[:count]
    extra = int(bool(f.prox_mu)) + int(bool(f.scaffold))
    check = check_cohort(cohort_trainer(config, model, data.task, "cpu"), inputs, targets,
                         extra_state=extra)
    if not check.vectorizes:
        if mode == "on":
            raise UserError(f"{vectorizing('on')}: {check.reason}")
        return check, ClientPath(False, reason=check.reason)
    if mode == "on":
        path = ClientPath(True)
    elif check.slow is not None:   # stacks, but vmap loops over the clients somewhere
        path = ClientPath(False, reason=check.slow)
    else:
        path = auto_path(model, config.device, f.sampled_clients, workers)
    if path.vectorized:
        if f.sampling == "poisson":
            path = replace(path, expected=f.sampled_clients)
        size = host_cohort_size(config, check, workers)
        if size is not None:
            path = path.sized(size)
    return check, path


def host_cohort_size(config, check: CohortCheck, workers: int) -> int | None:
    """Clients per cohort where the parent can tell: forced, or on CPU from the host's
    memory, either way at most the clients a round can sample (a cohort is never larger,
    and the banner says the size); None where the workers size it (a GPU's free memory).

    On a CPU a smaller cohort does not pay: its clients' kernels take the same time per
    client (a stacked linear layer is one small matrix product per client either way), and
    every stacked step pays a fixed few milliseconds of ``vmap`` work. Measured here
    (loaded 2-core CPU, the 2NN, 50 clients of 50 samples a round, one thread): CPU
    seconds a round 0.150 in one cohort of 50, 0.152 in two of 25, 0.173 in five of 10
    (3 runs each); wall seconds, 6 paired runs, 0.36 and 0.49 for 50 and 10."""
    f = config.fedavg
    most = table_rows(config)   # a Poisson round's bound, as on a GPU (``agree``)
    if f.vectorize_chunk is not None:
        return min(most, f.vectorize_chunk)
    if config.device != "cpu":
        return None
    return min(most, cohort_size(check.client_bytes,
                                 memory_budget(torch.device("cpu"), workers)))


def banner_line(path: ClientPath) -> str:
    if path.vectorized and path.cohort_size is None:
        return "clients: vectorized, cohorts sized from each worker's free GPU memory"
    return f"clients: {path.describe()}"


class CohortClients:
    """A worker's side of the stacked path."""

    def __init__(self, config, shared, setup, trainer, client_controls,
                 path: ClientPath | None, client_bytes: int | None):
        self.config, self.shared, self.setup = config, shared, setup
        self.trainer, self.client_controls = trainer, client_controls
        self.path = path if path is not None else \
            ClientPath(False, reason="--vectorize-clients off")
        self.agreed = not self.path.vectorized
        self.saved_size: int | None = None    # the cohort size of the run a resume continues
        self.work = ClientWork(config.seed, config.batch_size, config.fedavg.local_epochs,
                               AvailabilityConfig.of(config))
        self.cohort_trainer = cohort_trainer(config, trainer.model, setup.data.task,
                                             setup.device) if self.path.vectorized else None
        self.client_bytes = client_bytes   # one client's memory in a cohort (dry run)
        method = getattr(getattr(trainer, "spec", None), "method", None)
        vectorized = self.path.vectorized
        self.ditto = DittoCohort(config, trainer, setup) \
            if vectorized and method == "ditto" else None
        self.fedrep = FedRepCohort(config, trainer, setup) \
            if vectorized and method == "fedrep" else None

    def agree(self, group) -> ClientPath:
        """The cohort size, rank 0's for every rank (every rank calls this, in its first
        round): a resumed run's, else the parent's, else from the GPU's free memory."""
        if self.agreed:
            return self.path
        size = self.path.cohort_size
        if self.saved_size is not None and self.config.fedavg.vectorize_chunk is None:
            size = self.saved_size
        if size is None and group.rank == 0:
            device = self.setup.device
            # Under torchrun on several nodes the world is every node's ranks; those that
            # share rank 0's GPUs are its machine's.
            here = self.setup.local_workers or group.world_size
            sharers = math.ceil(here / max(1, torch.cuda.device_count()))
            size = min(self.shared.rows,
                       cohort_size(self.client_bytes or 1, memory_budget(device, sharers)))
        values = as_tensor(size or 0)
        group.broadcast_([values], src=0)
        self.path, self.agreed = self.path.sized(max(1, int(values[0]))), True
        return self.path

    # -- one cohort --------------------------------------------------------------------------
    def train(self, clients: list[int], round_index: int) -> list[ClientOutcome]:
        """Train ``clients`` as one cohort from the global model."""
        c, shared, trainer = self.config, self.shared, self.trainer
        trainer.load_global()
        corrections = None
        if c.fedavg.scaffold:
            corrections = torch.stack([scaffold.drift_correction(
                shared.controls, self.client_controls[client]) for client in clients])
        starts, frozen = fedavg_starts(trainer, clients, self.setup.device), ()
        if self.fedrep is not None:   # the heads first, then the bodies with them held
            starts, frozen = self.fedrep.train_heads(clients, round_index, shared), \
                self.fedrep.heads
            trainer.load_global()
        # Data drawn on demand: the cohort's rows drawn once for all its steps.
        feed, rows = trainer.feed.for_rows([shared.client_indices(k) for k in clients])
        outcomes = keep_personal(trainer, list(train_cohort(
            self.cohort_trainer, clients, round_index, self.work, rows, feed.batch,
            [p.detach() for p in trainer.params], trainer.client_lr(round_index),
            corrections, on_step=self.setup.progress.advance, starts=starts,
            frozen=frozen, sampled=trainer.round_sample.for_stragglers(round_index))))
        if self.ditto is not None:
            try:
                self.ditto.train(clients, round_index, shared)
            except Exception:
                # Retrained one at a time: the FedAvg cohort's progress is taken back.
                self.setup.progress.advance(-sum(o.samples for o in outcomes))
                raise
        return outcomes

    # -- a checkpoint's part -----------------------------------------------------------------
    def state(self) -> dict:
        if not (self.path.vectorized and self.agreed):
            return {}
        return {"cohort_size": self.path.cohort_size}

    def load_state(self, state: dict) -> None:
        # "cohort_chunk": checkpoints written before the glossary named it the cohort size.
        saved = state.get("cohort_size", state.get("cohort_chunk"))
        if isinstance(saved, int) and not isinstance(saved, bool) and saved >= 1:
            self.saved_size = saved

