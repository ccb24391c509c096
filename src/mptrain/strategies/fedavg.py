"""Federated averaging (McMahan et al. 2017) with many simulated clients on a few processes.

Clients are not processes and not model copies: a client is an index slice of the one shared
data set. Every round the same seeded sample of clients is drawn on every worker; each worker
trains its share of them one after the other, reusing one model and one optimizer (reset to
the global model and a fresh state for every client), and writes each client's result into
its row of a shared table. After a barrier every worker averages one slice of the columns,
weighted by client sample counts and summed in client-id order, straight into the shared
global parameters (a reduce-scatter through shared memory). So memory does not grow with the
number of clients, and the same seed gives the bitwise same model whatever the number of
workers (at the same threads per worker).

Where ranks do not share memory (torchrun across nodes) each rank averages its own clients
and the ranks combine the partial averages with the weighted-average collective instead: the
same maths, summed in a different order.

Options: ``--prox-mu`` (FedProx, Li et al. 2020), ``--server-lr``/``--server-momentum``
(FedAvgM, Hsu et al. 2019), ``--accept-failures`` (a client that raises is dropped from its
round instead of stopping the run).
"""

from __future__ import annotations

import copy
import time

import torch
import torch.nn as nn

from ..checkpoint import model_snapshot
from ..engine.channels_last import ChannelsLastTraining
from ..engine.optim import build_optimizer
from ..engine.schedule import learning_rate
from ..engine.seeding import seed_global_generator
from ..engine.task import loss_fn
from ..errors import ClientFailedError, UserError
from .base import ResourceNeeds, RoundWork, Strategy, WorkerProgram, model_tensor_count
from .data_parallel import copy_model_state, floating_state
from ..federated.aggregate import aggregate_rows, column_slice
from ..federated.client import add_proximal_gradient_
from ..federated.sampling import assign_clients, client_seed, sample_clients
from ..federated.server_opt import build_server_optimizer

#: Above this, the table of one round's client results is not kept in shared memory; the
#: workers then reduce per worker (results then depend on the number of workers, in the
#: last bits).
TABLE_LIMIT_BYTES = 1 << 30


class FedAvgStrategy(Strategy):
    name = "fedavg"
    unit = "round"
    settings = frozenset({"rounds", "clients", "clients_per_round", "client_fraction",
                          "local_epochs", "partition", "prox_mu", "server_lr",
                          "server_momentum", "accept_failures", "max_restarts"})
    instead = {"epochs": "--rounds",
               "steps_per_epoch": "--rounds with fewer --clients-per-round"}
    runs_under_torchrun = True
    resumes_on_other_worker_counts = True   # the server's state is the checkpoint

    def __init__(self, config):
        super().__init__(config)
        self.client_index: torch.Tensor | None = None    # every client's samples, one after another
        self.client_offsets: torch.Tensor | None = None  # [clients + 1]
        self.global_flat: torch.Tensor | None = None     # the global model, flat, shared
        self.velocity: torch.Tensor | None = None        # FedAvgM's buffer, shared
        self.table: torch.Tensor | None = None           # [clients per round, numel]
        self.weights: torch.Tensor | None = None         # [clients per round] sample counts
        #: Whether one round's results go through ``table`` (decided by ``prepare``).
        self.shared_table = True

    # -- facts ---------------------------------------------------------------------------------
    @classmethod
    def recommended(cls, defaults):
        values = super().recommended(defaults)
        values.update(defaults.federated)
        return values

    @classmethod
    def check_config(cls, config):
        if config.clients_per_round is not None and config.client_fraction is not None:
            raise UserError("give --clients-per-round or --client-fraction, not both")
        if config.sampled_clients > config.clients:
            raise UserError(f"--clients-per-round {config.sampled_clients} is more than "
                            f"--clients {config.clients}; sample at most every client")

    @classmethod
    def units(cls, config):
        return config.rounds

    # -- parent side -------------------------------------------------------------------------
    def check(self, data, model, plan) -> None:
        """Before anything starts: cut the clients, since cutting them is how a partition
        that cannot split this data set (or a user's function that returns bad clients) is
        found -- in one line, before any output exists. The cut is kept for ``prepare``."""
        self.partition(data)

    def partition(self, data) -> None:
        """Cut the training set into clients (once; restarts reuse it)."""
        if self.client_index is not None:
            return
        from ..data.partitions import partition_clients

        parts = partition_clients(self.config.partition, data.train.targets,
                                  self.config.clients, self.config.seed)
        sizes = torch.tensor([0] + [len(p) for p in parts], dtype=torch.int64)
        self.client_offsets = sizes.cumsum(0)
        self.client_index = torch.cat([p.to(torch.int64) for p in parts])

    def uses_shared_table(self, model, plan) -> bool:
        """Whether one round's results fit a table every rank maps."""
        numel = sum(t.numel() for t in floating_state(model))
        return plan.comm.shares_memory and \
            self.config.sampled_clients * numel * 4 <= TABLE_LIMIT_BYTES

    def prepare(self, model, data=None, plan=None) -> None:
        self.partition(data)
        self.shared_table = self.uses_shared_table(model, plan)
        flat = torch.cat([t.detach().reshape(-1).float() for t in floating_state(model)])
        self.global_flat = flat
        self.velocity = torch.zeros_like(flat) if self.config.server_momentum else None
        rows = self.config.sampled_clients
        self.table = torch.zeros(rows, flat.numel()) if self.shared_table else None
        self.weights = torch.zeros(rows, dtype=torch.float64) if self.shared_table else None
        if plan.comm.shares_memory:
            for tensor in (self.client_index, self.client_offsets, self.global_flat,
                           self.velocity, self.table, self.weights):
                if tensor is not None:
                    tensor.share_memory_()

    def needs(self, model, data, plan) -> ResourceNeeds:
        # The fallback reduction sends the flat model and its weight through the group.
        # Clients end in last batches of as many sizes as there are clients: those shapes
        # are left to the workers, only the full batch is rehearsed.
        return ResourceNeeds(comm_numel=sum(t.numel() for t in floating_state(model)) + 1,
                             shared_tensors=model_tensor_count(model) + 6,
                             batch_sizes=(self.config.batch_size,))

    def samples_per_round(self, data, workers):
        mean_client = len(data.train) / self.config.clients
        return round(self.config.sampled_clients * mean_client * self.config.local_epochs)

    def program(self, setup) -> WorkerProgram:
        return FedAvgProgram(self, setup)

    def round_extras(self, reports) -> dict:
        extras = [r.extras for r in reports]
        clients = sum(e.get("clients", 0) for e in extras)
        failed = sorted(c for e in extras for c in e.get("failed_clients", ()))
        trained = clients - len(failed)
        loss_sum = sum(e.get("client_loss_sum", 0.0) for e in extras)
        return {"round": reports[0].epoch + 1, "clients": clients,
                "mean_client_loss": loss_sum / trained if trained else None,
                "failed_clients": failed,
                "round_s": max(r.evaluated_at for r in reports)
                - min(r.train_started for r in reports)}

    def round_line(self, extras):
        return [f"{extras['clients']} clients"] if extras.get("clients") is not None else []

    def summary_fields(self):
        c = self.config
        return {"rounds": c.rounds, "clients": c.clients,
                "clients_per_round": c.sampled_clients, "local_epochs": c.local_epochs,
                "partition": c.partition, "prox_mu": c.prox_mu, "server_lr": c.server_lr,
                "server_momentum": c.server_momentum}

    def describe(self, plan, model):
        c = self.config
        lines = [f"{c.clients} clients ({c.partition}), {c.sampled_clients} per round, "
                 f"{c.local_epochs} local epoch(s) of batch {c.batch_size}, {c.rounds} rounds"]
        extras = []
        if c.prox_mu:
            extras.append(f"FedProx mu {c.prox_mu:g}")
        if c.server_lr != 1.0 or c.server_momentum:
            extras.append(f"server lr {c.server_lr:g} momentum {c.server_momentum:g}")
        if c.accept_failures:
            extras.append("failing clients are dropped from their round")
        if plan.comm.shares_memory and not self.uses_shared_table(model, plan):
            extras.append("round results too large for a shared table: averaged per worker, "
                          "so the last bits depend on --workers")
        if extras:
            lines.append(" · ".join(extras))
        return lines


class FedAvgProgram(WorkerProgram):
    """One worker: each round, train my share of the sampled clients, then aggregate."""

    def __init__(self, strategy: FedAvgStrategy, setup):
        self.strategy, self.setup, self.config = strategy, setup, strategy.config
        self.group = setup.group
        self.model = copy.deepcopy(setup.model).to(setup.device)
        # Private to this worker: it may change layout (the global model stays as it is).
        self.layout = ChannelsLastTraining(self.model, setup.device)
        self.tensors = floating_state(self.model)
        self.params = list(self.model.parameters())
        c = self.config
        self.optimizer = build_optimizer(self.params, c.optimizer, c.lr, c.momentum,
                                         c.weight_decay)
        offsets = strategy.client_offsets
        self.sizes = (offsets[1:] - offsets[:-1]).tolist()
        # Views of the shared global model, one per tensor: the server updates it in place,
        # so they stay valid for the whole run.
        sizes = [t.numel() for t in self.tensors]
        self.global_views = [view.view_as(t) for view, t in
                             zip(strategy.global_flat.split(sizes), self.tensors)]
        self.global_params = self.global_views[:len(self.params)]   # FedProx's anchor
        self.prox_scratch = [torch.empty_like(p) for p in self.params] if c.prox_mu else None
        self._load_global()

    def train_round(self, round_index: int) -> RoundWork:
        c, group, strategy = self.config, self.group, self.strategy
        sampled = sample_clients(c.clients, c.sampled_clients, c.seed, round_index)
        mine = assign_clients(sampled, self.sizes, group.world_size)[group.rank]
        started = time.monotonic()
        steps = samples = 0
        loss_sum = client_loss_sum = 0.0
        failed = []
        partial, partial_weight = None, 0.0
        for client in mine:
            self._load_global()
            try:
                client_steps, client_samples, client_loss = self._train_client(client,
                                                                               round_index)
            except Exception as err:  # noqa: BLE001 - a client's failure is reported by id
                if not c.accept_failures:
                    raise ClientFailedError(
                        f"client {client} failed in round {round_index + 1} on worker rank "
                        f"{group.rank}: {type(err).__name__}: {err} (--accept-failures drops "
                        "failing clients from their round instead)") from err
                failed.append(client)
                client_samples = 0
            else:
                steps += client_steps
                samples += client_samples
                loss_sum += client_loss
                client_loss_sum += client_loss / max(1, client_samples)
            if strategy.shared_table:
                slot = sampled.index(client)
                self._flat_result(out=strategy.table[slot])
                strategy.weights[slot] = float(client_samples)
            elif client_samples:
                result = self._flat_result()
                weight = float(client_samples)
                partial = result * weight if partial is None else partial.add_(result,
                                                                               alpha=weight)
                partial_weight += weight
        ended = time.monotonic()
        if strategy.shared_table:
            self._reduce_shared_table()
        else:
            self._reduce_through_group(partial, partial_weight)
        self._load_global()
        return RoundWork(steps=steps, samples=samples, loss_sum=loss_sum, started=started,
                         ended=ended, extras={"clients": len(mine), "failed_clients": failed,
                                              "client_loss_sum": client_loss_sum})

    def _train_client(self, client: int, round_index: int) -> tuple[int, int, float]:
        c, setup = self.config, self.setup
        strategy = self.strategy
        start, end = strategy.client_offsets[client].item(), \
            strategy.client_offsets[client + 1].item()
        indices = strategy.client_index[start:end]
        generator = torch.Generator().manual_seed(client_seed(c.seed, round_index, client))
        seed_global_generator(client_seed(c.seed, round_index, client), setup.device)
        self.optimizer.state.clear()  # a fresh optimizer for every client
        lr = learning_rate(c.lr_schedule, c.lr, c.lr_decay, round_index, 0, 1)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.model.train()
        steps, loss_sum = 0, torch.zeros((), dtype=torch.float64)
        for _ in range(c.local_epochs):
            order = indices[torch.randperm(len(indices), generator=generator)]
            for batch in torch.split(order, c.batch_size):
                inputs, targets = setup.data.train.batch(batch)
                inputs, targets = inputs.to(setup.device), targets.to(setup.device)
                self.optimizer.zero_grad(set_to_none=True)
                loss = loss_fn(setup.data.task, self.layout.forward(inputs), targets)
                loss.backward()
                if c.prox_mu:
                    add_proximal_gradient_(self.params, self.global_params, c.prox_mu,
                                           self.prox_scratch)
                self.optimizer.step()
                loss_sum += loss.detach() * len(batch)
                setup.progress.advance(len(batch))
                steps += 1
        return steps, len(indices) * c.local_epochs, float(loss_sum)

    def _reduce_shared_table(self) -> None:
        """Every rank averages its slice of the columns, in client-id order, into the global
        parameters; barriers on both sides: all rows written before, all slices after."""
        strategy, c = self.strategy, self.config
        self.group.barrier()
        weights = strategy.weights.tolist()
        if any(w > 0 for w in weights):
            part = column_slice(strategy.global_flat.numel(), self.group.world_size,
                                self.group.rank)
            average = aggregate_rows(strategy.table[:, part], weights)
            velocity = strategy.velocity[part] if strategy.velocity is not None else None
            state = {"velocity": velocity} if velocity is not None else {}
            build_server_optimizer("sgd", c.server_lr, c.server_momentum).step_(
                strategy.global_flat[part], average, state)
        self.group.barrier()

    def _reduce_through_group(self, partial, weight) -> None:
        c, strategy = self.config, self.strategy
        if partial is None:
            partial = torch.zeros_like(strategy.global_flat)
        average = partial / weight if weight else partial
        total = self.group.weighted_average_([average], weight)
        if total > 0:
            state = {"velocity": strategy.velocity} if strategy.velocity is not None else {}
            build_server_optimizer("sgd", c.server_lr, c.server_momentum).step_(
                strategy.global_flat, average, state)

    def _flat_result(self, out: torch.Tensor | None = None) -> torch.Tensor:
        """This client's model (parameters and floating buffers) as one flat vector."""
        return torch.cat([t.detach().reshape(-1) for t in self.tensors], out=out)

    def _load_global(self) -> None:
        """Make the worker's model the global model (parameters and floating buffers)."""
        with torch.no_grad():
            for tensor, view in zip(self.tensors, self.global_views):
                tensor.copy_(view)

    def eval_model(self) -> nn.Module:
        return self.model

    def state(self) -> dict:
        if self.group.rank != 0:
            return {}
        state = {"model": model_snapshot(self.model)}
        if self.strategy.velocity is not None:
            state["server_velocity"] = self.strategy.velocity.clone()
        return state

    def load_state(self, state: dict) -> None:
        # The global model came back through the parent's model; only FedAvgM's buffer is
        # the strategy's own. Rank 0 writes it; the others read it after the round's first
        # barrier.
        velocity = state.get("server_velocity")
        if velocity is not None and self.strategy.velocity is not None:
            self.strategy.velocity.copy_(velocity)

    def publish(self, shared_model: nn.Module) -> None:
        if self.group.rank == 0:
            copy_model_state(self.model, shared_model)
