"""fedavg's stacked path (``--vectorize-clients``): the parent's check of the model before
anything starts, and a worker's cohorts -- which path its clients train on, decided once
for every rank, and the training of one cohort.

The parent dry-runs the model on one batch on CPU (``federated.vectorizable``): ``on``
refuses there what cannot vectorize, ``auto`` notes it and trains one client at a time. A
worker sizes its cohorts from its device's free memory (CPU: the parent's size, the one
the banner shows); with ``auto``, rank 0 times the first cohort both ways, and its verdict
and size go to every rank (``broadcast_``), so the ranks never train on different paths.
A checkpoint keeps the path (``state``), so a resumed run trains as the run it continues.
"""

from __future__ import annotations

import math

import torch

from ...engine.step import train_step
from ...errors import UserError
from ...federated import scaffold
from ...federated.cohort import CohortTrainer
from ...federated.cohort_choice import PROBE_STEPS, ClientPath, auto_choice, timed
from ...federated.cohort_optim import ClientOptimizerSettings
from ...federated.cohort_plan import client_batches, plan_cohort
from ...federated.cohort_round import ClientOutcome, ClientWork, train_cohort
from ...federated.sampling import client_seed
from ...federated.vectorizable import CohortCheck, check_cohort, chunk_size, memory_budget


def cohort_trainer(config, model, task: str, device) -> CohortTrainer:
    return CohortTrainer(model, task, ClientOptimizerSettings(
        config.optimizer, config.lr, config.momentum, config.weight_decay),
        torch.device(device), precision=config.precision, prox_mu=config.prox_mu)


def check_model(config, model, data) -> CohortCheck | None:
    """The parent's dry run (None with ``off``); ``on`` refuses a model that cannot
    vectorize, in one line naming the module."""
    if config.vectorize_clients == "off":
        return None
    count = min(len(data.train), config.batch_size)
    inputs, targets = data.train.batch(torch.arange(count))
    extra = int(bool(config.prox_mu)) + int(bool(config.scaffold))
    check = check_cohort(cohort_trainer(config, model, data.task, "cpu"), inputs, targets,
                         extra_state=extra)
    if not check.vectorizes and config.vectorize_clients == "on":
        raise UserError(f"--vectorize-clients on: {check.reason}")
    return check


def host_chunk(config, check: CohortCheck | None, workers: int) -> int | None:
    """Clients per cohort on CPU (what the banner shows), None where the workers size it
    (a GPU's free memory) or nothing vectorizes."""
    if check is None or not check.vectorizes:
        return None
    if config.vectorize_chunk is not None:
        return config.vectorize_chunk
    if config.device != "cpu":
        return None
    return min(config.sampled_clients if config.sampling == "fixed" else config.clients,
               chunk_size(check.client_bytes, memory_budget(torch.device("cpu"), workers)))


def banner_line(config, check: CohortCheck | None, chunk: int | None) -> str:
    mode = config.vectorize_clients
    if check is None:
        return "clients one at a time (--vectorize-clients off)"
    if not check.vectorizes:
        return f"clients one at a time: {check.reason}"
    size = f"cohorts of up to {chunk} clients" if chunk is not None else \
        "cohorts sized from each worker's free GPU memory"
    if mode == "auto":
        return f"clients stacked ({size}) where the first cohort measures faster (auto)"
    return f"clients stacked: {size}"


class CohortClients:
    """A worker's side of the stacked path."""

    def __init__(self, config, shared, setup, trainer, client_controls,
                 check: CohortCheck | None, chunk: int | None):
        self.config, self.shared, self.setup = config, shared, setup
        self.trainer, self.client_controls = trainer, client_controls
        self.check, self.chunk = check, chunk
        self.path: ClientPath | None = None
        self.saved: ClientPath | None = None    # the path of the run a resume continues
        self.work = ClientWork(config.seed, config.batch_size, config.local_epochs,
                               config.straggler_rate)
        self.stacked = cohort_trainer(config, trainer.model, setup.data.task, setup.device) \
            if check is not None and check.vectorizes else None

    # -- which path, once per run ----------------------------------------------------------
    def choose(self, group, mine: list[int], round_index: int) -> ClientPath:
        """Decide on rank 0 and tell every rank (every rank calls this, in its first
        round)."""
        if self.stacked is None:
            reason = "--vectorize-clients off" if self.check is None else self.check.reason
            self.path = ClientPath(0, reason)
            return self.path
        if group.rank == 0:
            self.path = self._decide(mine, round_index)
        values = self.path.as_tensor() if group.rank == 0 else ClientPath(0).as_tensor()
        group.broadcast_([values], src=0)
        if group.rank != 0:   # rank 0 keeps its reason in words; it speaks for the run
            self.path = ClientPath.from_tensor(values, reason="as rank 0 decided")
        return self.path

    def _decide(self, mine, round_index) -> ClientPath:
        c = self.config
        saved = self.saved
        if saved is not None and c.vectorize_chunk is None and \
                (c.vectorize_clients == "auto" or saved.vectorized):
            return saved if c.vectorize_clients == "auto" else ClientPath(saved.chunk)
        chunk = self.chunk
        if chunk is None:   # a GPU: its free memory now, shared by the ranks on it
            device = self.setup.device
            sharers = math.ceil(self.setup.group.world_size / max(1, torch.cuda.device_count()))
            chunk = min(self.shared.rows,
                        chunk_size(self.check.client_bytes, memory_budget(device, sharers)))
        if c.vectorize_clients == "on":
            return ClientPath(chunk)
        clients = list(mine) or list(range(min(c.clients, chunk)))
        return self._probe(clients[:chunk], round_index, chunk)

    def _probe(self, clients, round_index, chunk) -> ClientPath:
        """``auto``: the same first steps of ``clients`` stacked and one at a time."""
        trainer, device = self.trainer, self.setup.device
        sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else None
        lr = trainer.client_lr(round_index)
        batches = {client: self._first_batches(client, PROBE_STEPS + 1) for client in clients}

        def stacked(steps):
            plan = plan_cohort([batches[client][:steps] for client in clients],
                         self.config.batch_size)
            trainer.load_global()
            self.stacked.train(plan, trainer.feed.batch, [p.detach() for p in trainer.params],
                               lr=lr)

        def alone(steps):
            for client in clients:
                trainer.load_global()
                trainer.optimizer.state.clear()
                for batch in batches[client][:steps]:
                    inputs, targets = trainer.feed.batch(batch)
                    train_step(trainer.forward, trainer.optimizer, inputs, targets,
                               self.setup.data.task, trainer.correct_gradients)

        stacked(1), alone(1)    # warm-up: first calls allocate and dispatch the slow way
        stacked_s, alone_s = timed(lambda: stacked(None), sync), timed(lambda: alone(None), sync)
        trainer.load_global()
        return auto_choice(stacked_s, alone_s, chunk)

    def _first_batches(self, client, count) -> list[torch.Tensor]:
        generator = torch.Generator().manual_seed(client_seed(self.config.seed, 0, client))
        return client_batches(self.shared.client_indices(client), generator,
                              self.config.batch_size, self.config.local_epochs, count)

    # -- one cohort --------------------------------------------------------------------------
    def train(self, clients: list[int], round_index: int) -> list[ClientOutcome]:
        """Train ``clients`` as one cohort from the global model."""
        c, shared, trainer = self.config, self.shared, self.trainer
        trainer.load_global()
        corrections = None
        if c.scaffold:
            corrections = torch.stack([scaffold.drift_correction(
                shared.controls, self.client_controls[client]) for client in clients])
        return list(train_cohort(
            self.stacked, clients, round_index, self.work, shared.client_index,
            shared.client_offsets, trainer.feed.batch,
            [p.detach() for p in trainer.params], trainer.client_lr(round_index),
            corrections, on_step=self.setup.progress.advance))

    # -- a checkpoint's part -----------------------------------------------------------------
    def state(self) -> dict:
        if self.path is None:
            return {}
        return {"client_path": {"chunk": self.path.chunk, "reason": self.path.reason,
                                "speedup": self.path.speedup}}

    def load_state(self, state: dict) -> None:
        saved = state.get("client_path")
        if isinstance(saved, dict) and isinstance(saved.get("chunk"), int) \
                and saved["chunk"] >= 0:
            speedup = saved.get("speedup")
            self.saved = ClientPath(saved["chunk"], str(saved.get("reason") or ""),
                                    float(speedup) if isinstance(speedup, float) else None)

