"""Federated averaging (McMahan et al. 2017) with many simulated clients on a few processes,
and the algorithms around it: FedProx, server optimizers (FedAvgM, FedAdam, FedYogi,
FedAdagrad), SCAFFOLD, unreliable clients, DP-FedAvg with an accountant, per-client
evaluation.

Clients are not processes and not model copies: a client is an index slice of the one shared
data set. Every round the same seeded sample of clients is drawn on every worker; each worker
trains its share of them one after the other (``fedavg_worker``), reusing one model and one
optimizer, and writes each client's result into its row of a shared table. After a barrier
every worker aggregates one slice of the columns in client-id order and applies the server
step to that slice of the shared global parameters (a reduce-scatter through shared memory;
the server optimizer's state, SCAFFOLD's variates and the clip live in shared memory, sliced
the same way). So memory does not grow with the clients sampled, and the same seed gives the
bitwise same model whatever the number of workers (at the same threads per worker).

Where ranks do not share memory (torchrun across nodes) each rank averages its own clients
and the ranks combine the partial averages with the weighted-average collective instead: the
same maths, summed in a different order; SCAFFOLD and DP need the shared table and are
refused there.

This module is the parent's side (facts, refusals, what is shared, what the run reports);
the maths is in ``mptrain.federated``.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ..errors import UserError
from ..federated.accounting import PrivacyAccountant, require_dp_accounting
from ..federated.sampling import poisson_capacity
from ..federated.server_opt import build_server_optimizer
from ..launch.sharing import shared_zeros
from ..report.console import metric_parts
from .base import ResourceNeeds, Strategy, WorkerProgram, model_tensor_count
from .data_parallel import floating_state
from .fedavg_settings import check_fedavg_config, dp_delta

#: Above this, the table of one round's client results is not kept in shared memory; the
#: workers then reduce per worker (results then depend on the number of workers, in the
#: last bits).
TABLE_LIMIT_BYTES = 1 << 30
#: Where SCAFFOLD's client variates go when /dev/shm cannot hold them (under --out).
CONTROLS_FILE = "scaffold-client-controls.f32"
#: Of /dev/shm's free space, what the client variates may take (the rest: data, model,
#: collectives, other runs).
SHM_SHARE = 0.5
#: Rounds in a row of a lone trained client's non-finite update that mean the run diverged.
LONE_CLIENT_ROUNDS = 3


class FedAvgStrategy(Strategy):
    name = "fedavg"
    unit = "round"
    settings = frozenset({
        "rounds", "clients", "clients_per_round", "client_fraction", "local_epochs",
        "partition", "prox_mu", "server_optimizer", "server_lr", "server_momentum",
        "server_betas", "server_tau", "accept_failures", "max_restarts", "scaffold",
        "sampling", "dropout_rate", "straggler_rate", "dp_clip", "dp_noise", "dp_delta",
        "target_epsilon", "accountant", "dp_clip_quantile", "dp_clip_lr", "dp_count_noise",
        "client_eval_every"})
    instead = {"epochs": "--rounds",
               "steps_per_epoch": "--rounds with fewer --clients-per-round"}
    runs_under_torchrun = True
    resumes_on_other_worker_counts = True   # the server's state is the checkpoint

    def __init__(self, config):
        super().__init__(config)
        self.client_index: torch.Tensor | None = None    # every client's samples, one after another
        self.client_offsets: torch.Tensor | None = None  # [clients + 1]
        self.global_flat: torch.Tensor | None = None     # the global model, flat, shared
        self.server_state: dict[str, torch.Tensor] = {}  # the server optimizer's, shared
        self.table: torch.Tensor | None = None           # [rows, numel] one round's results
        self.weights: torch.Tensor | None = None         # [rows] weight of each row (0: none)
        self.within: torch.Tensor | None = None          # [rows] DP: update within the clip
        self.controls: torch.Tensor | None = None        # SCAFFOLD's c [params]
        self.control_deltas: torch.Tensor | None = None  # [rows, params] the clients' dc_i
        self.touched: torch.Tensor | None = None         # [clients] uint8: c_i ever set
        self.clip: torch.Tensor | None = None            # [1] float64: DP clip (adaptive)
        self.privacy: torch.Tensor | None = None         # [2] float64: epsilon, stop flag
        self.client_accuracy: torch.Tensor | None = None  # [clients] float64
        self._client_controls: torch.Tensor | None = None  # [clients, params] c_i
        self.controls_path: Path | None = None           # c_i in a file, not /dev/shm
        #: Whether one round's results go through ``table`` (decided by ``prepare``).
        self.shared_table = True
        #: The parent's view of the last round's privacy spent (for summary.json).
        self.last_epsilon: float | None = None
        self.stopped_for_privacy_at: int | None = None
        self._rounds_all_nonfinite = 0   # in a row (``_diverged``)

    # -- facts ---------------------------------------------------------------------------------
    @classmethod
    def recommended(cls, defaults):
        values = super().recommended(defaults)
        values.update(defaults.federated)
        return values

    @classmethod
    def check_config(cls, config):
        check_fedavg_config(config)

    @classmethod
    def units(cls, config):
        return config.rounds

    # -- parent side -------------------------------------------------------------------------
    def check(self, data, model, plan) -> None:
        """Before anything starts: cut the clients, since cutting them is how a partition
        that cannot split this data set (or a user's function that returns bad clients) is
        found -- in one line, before any output exists. The cut is kept for ``prepare``.
        Then what needs shared memory, the accountant, and room for SCAFFOLD's variates."""
        c = self.config
        self.partition(data)
        if (c.dp_clip is not None or c.scaffold) and not self.uses_shared_table(model, plan):
            what = "--scaffold" if c.scaffold else "--dp-clip/--dp-noise"
            raise UserError(f"{what} needs the round's results in one machine's shared "
                            "memory (every client's row, summed in client order); run "
                            "mptrain's own workers on one machine, or fewer "
                            "--clients-per-round for a smaller table")
        if c.client_eval_every and not plan.comm.shares_memory:
            raise UserError("--client-eval-every needs one machine's shared memory (every "
                            "rank writes its clients' accuracies into one table); run "
                            "mptrain's own workers on one machine")
        if c.private:
            require_dp_accounting()
            first = PrivacyAccountant(c.accountant or "rdp").epsilon_after(
                c.sample_rate, c.dp_noise, dp_delta(c))
            if c.target_epsilon is not None and first > c.target_epsilon:
                raise UserError(f"--target-epsilon {c.target_epsilon:g} is spent by the first "
                                f"round alone (epsilon {first:.3g} at delta {dp_delta(c):g}); "
                                "raise it, add noise (--dp-noise) or sample fewer clients")
        if c.scaffold:
            self.controls_placement(model, plan)   # refuses when neither place fits

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

    def table_rows(self) -> int:
        """Rows of the round's table: the clients a round samples (a bound on Poisson's
        count)."""
        c = self.config
        if c.sampling == "poisson":
            return poisson_capacity(c.clients, c.sample_rate)
        return c.sampled_clients

    def uses_shared_table(self, model, plan) -> bool:
        """Whether one round's results fit a table every rank maps."""
        numel = sum(t.numel() for t in floating_state(model))
        return plan.comm.shares_memory and self.table_rows() * numel * 4 <= TABLE_LIMIT_BYTES

    def controls_placement(self, model, plan) -> tuple[str, int]:
        """Where SCAFFOLD's client variates go -- ``shm`` or ``file`` (under --out) -- and
        their bytes; a refusal with the figures when neither has room."""
        need = self.config.clients * param_numel(model) * 4
        shm_free = _free_bytes("/dev/shm")
        if shm_free is None or need <= SHM_SHARE * shm_free:
            return "shm", need
        where = self.out_dir
        disk_free = _free_bytes(_existing_parent(where)) if where is not None else None
        if disk_free is not None and need <= disk_free:
            return "file", need
        shm = f"{shm_free / 2**20:,.0f} MiB free in /dev/shm (half usable)"
        disk = f"{disk_free / 2**20:,.0f} MiB free under --out" if disk_free is not None \
            else "no --out folder to map a file in"
        raise UserError(f"SCAFFOLD's client variates need {need / 2**20:,.0f} MiB "
                        f"({self.config.clients} clients x {param_numel(model):,} "
                        f"parameters x 4 bytes): {shm}, {disk}; give --out on a disk with "
                        "room, or fewer --clients")

    def prepare(self, model, data=None, plan=None) -> None:
        c = self.config
        self.partition(data)
        self.shared_table = self.uses_shared_table(model, plan)
        flat = torch.cat([t.detach().reshape(-1).float() for t in floating_state(model)])
        self.global_flat = flat
        self.server_state = self.server_optimizer().init_state(flat.numel())
        rows = self.table_rows()
        shared = []
        if self.shared_table:   # only when workers share memory (``uses_shared_table``)
            self.table = shared_zeros((rows, flat.numel()))
            self.weights = torch.zeros(rows, dtype=torch.float64)
            shared.append(self.weights)
        if c.dp_clip is not None:
            self.within = torch.zeros(rows, dtype=torch.float64)
            self.clip = torch.tensor([float(c.dp_clip)], dtype=torch.float64)
            shared += [self.within, self.clip]
        if c.private:
            require_dp_accounting()   # imported once here: forked workers inherit it
            self.privacy = torch.zeros(2, dtype=torch.float64)
            shared.append(self.privacy)
        if c.scaffold:
            params = param_numel(model)
            self.controls = torch.zeros(params)
            self.control_deltas = torch.zeros(rows, params)
            self.touched = torch.zeros(c.clients, dtype=torch.uint8)
            shared += [self.controls, self.control_deltas, self.touched]
            self._prepare_client_controls(model, plan)
        if c.client_eval_every:
            self.client_accuracy = torch.full((c.clients,), float("nan"), dtype=torch.float64)
            shared.append(self.client_accuracy)
        if plan.comm.shares_memory:
            for tensor in [self.client_index, self.client_offsets, self.global_flat,
                           *self.server_state.values(), *shared]:
                tensor.share_memory_()

    def _prepare_client_controls(self, model, plan) -> None:
        place, need = self.controls_placement(model, plan)
        rows = (self.config.clients, param_numel(model))
        if place == "shm":
            self._client_controls = shared_zeros(rows) if plan.comm.shares_memory \
                else torch.zeros(rows)
            return
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.controls_path = Path(self.out_dir) / CONTROLS_FILE
        with open(self.controls_path, "wb") as handle:
            handle.truncate(need)   # a sparse file of zeros; a restart starts it afresh
        self._client_controls = None   # mapped in each process (``client_controls``)

    @property
    def client_controls(self) -> torch.Tensor:
        """SCAFFOLD's table of client variates ``c_i`` [clients, params]: shared memory, or
        a file every process maps ``MAP_SHARED`` (writes of one are seen by all)."""
        if self._client_controls is None and self.controls_path is not None:
            rows, params = self.config.clients, self.controls.numel()
            self._client_controls = torch.from_file(
                str(self.controls_path), shared=True, size=rows * params,
                dtype=torch.float32).view(rows, params)
        return self._client_controls

    def __getstate__(self):
        # A file-backed table is mapped again by each spawned worker, not pickled.
        state = dict(self.__dict__)
        if self.controls_path is not None:
            state["_client_controls"] = None
        return state

    def server_optimizer(self):
        c = self.config
        return build_server_optimizer(c.server_optimizer, c.server_lr, c.server_momentum,
                                      c.server_betas, c.server_tau)

    def needs(self, model, data, plan) -> ResourceNeeds:
        # The fallback reduction sends the flat model and its weight through the group.
        # Clients end in last batches of as many sizes as there are clients: those shapes
        # are left to the workers, only the full batch is rehearsed.
        c = self.config
        numel = sum(t.numel() for t in floating_state(model))
        rows = self.table_rows()
        extra = 4 * numel * len(self.server_optimizer().init_state(0))
        if plan.comm.shares_memory and self.uses_shared_table(model, plan):
            extra += rows * (numel * 4 + 16)
        if c.scaffold:
            params = param_numel(model)
            extra += 4 * params * (rows + 1) + c.clients
            try:
                place, need = self.controls_placement(model, plan)
            except UserError:
                place, need = "none", 0     # ``check`` refuses it, with the figures
            extra += need if place == "shm" else 0
        if c.client_eval_every:
            extra += 8 * c.clients
        return ResourceNeeds(comm_numel=numel + 1,
                             shared_tensors=model_tensor_count(model) + 14,
                             batch_sizes=(c.batch_size,), extra_shared_bytes=extra)

    def samples_per_round(self, data, workers):
        mean_client = len(data.train) / self.config.clients
        return round(self.config.sampled_clients * mean_client * self.config.local_epochs)

    def program(self, setup) -> WorkerProgram:
        from .fedavg_worker import FedAvgProgram

        return FedAvgProgram(self, setup)

    # -- what the run says about itself ----------------------------------------------------------
    def round_extras(self, reports) -> dict:
        extras = [r.extras for r in reports]
        clients = sum(e.get("clients", 0) for e in extras)
        failed = sorted(c for e in extras for c in e.get("failed_clients", ()))
        nonfinite = sorted(c for e in extras for c in e.get("nonfinite_clients", ()))
        dropped = sum(e.get("dropped", 0) for e in extras)
        reported = sum(e.get("reported", 0) for e in extras)
        loss_sum = sum(e.get("client_loss_sum", 0.0) for e in extras)
        trained = clients - len(failed)
        row = {"round": reports[0].index + 1, "clients": clients,
               "mean_client_loss": loss_sum / trained if trained else None,
               "failed_clients": failed, "reported": reported, "dropped": dropped,
               "partial": sum(e.get("partial", 0) for e in extras),
               "round_s": max(r.evaluated_at for r in reports)
               - min(r.train_started for r in reports)}
        if nonfinite:
            row["nonfinite_clients"] = nonfinite
        # failed_clients holds the non-finite ones too; those trained.
        diverged = self._diverged(row["round"], nonfinite,
                                  clients - len(failed) + len(nonfinite))
        if diverged:
            row["diverged"] = diverged
        server = extras[0]   # rank 0 speaks for the server
        for key in ("epsilon", "dp_clip", "client_acc_mean", "client_acc_std",
                    "client_acc_p10", "client_acc_worst", "clients_evaluated"):
            if key in server:
                row[key] = server[key]
        if "epsilon" in row:
            self.last_epsilon = row["epsilon"]
        if server.get("privacy_stop"):
            self.stopped_for_privacy_at = row["round"]
            row["stopped"] = "privacy budget"
        return row

    def _diverged(self, round_number: int, nonfinite: list[int], trained: int) -> str | None:
        """Whether the global model itself is broken: every client that trained this round
        sent a non-finite update -- at least two of them, or a lone client three rounds in a
        row (one client's bad data leaves the others finite, and is dropped and counted).
        Dropping them all and going on would change nothing in any later round (seen:
        SCAFFOLD at lr 0.1 on shards:2 spun through 930 such rounds)."""
        if nonfinite and len(nonfinite) == trained:
            self._rounds_all_nonfinite += 1
        else:
            self._rounds_all_nonfinite = 0
        if trained >= 2 and self._rounds_all_nonfinite:
            return (f"every client's update was non-finite in round {round_number} "
                    f"({trained} clients)")
        if self._rounds_all_nonfinite >= LONE_CLIENT_ROUNDS:
            return (f"every client's update was non-finite in rounds "
                    f"{round_number - LONE_CLIENT_ROUNDS + 1}-{round_number}")
        return None

    def round_line(self, metrics):
        extras, parts = metrics.extras, []
        if extras.get("clients") is not None:
            parts.append(f"{extras['clients']} clients")
            if extras.get("reported", extras["clients"]) != extras["clients"]:
                parts.append(f"{extras['reported']} reported")
        if extras.get("epsilon") is not None:
            parts.append(f"ε {extras['epsilon']:.3g}")
        if extras.get("client_acc_mean") is not None:
            parts.append(f"clients acc {100 * extras['client_acc_mean']:.1f}% "
                         f"(worst {100 * extras['client_acc_worst']:.1f}%)")
        return parts + metric_parts(metrics)

    def round_notes(self, metrics):
        """What a round's clients did that the user must know."""
        extras, index, notes = metrics.extras, metrics.epoch, []
        nonfinite = extras.get("nonfinite_clients") or []
        failed = [c for c in extras.get("failed_clients") or [] if c not in nonfinite]
        if failed:
            notes.append(f"round {index}: dropped failing client(s) "
                         f"{', '.join(map(str, failed))} (--accept-failures)")
        if nonfinite:
            notes.append(f"round {index}: dropped client(s) {', '.join(map(str, nonfinite))}: "
                         "non-finite update")
        noise = " but the noise" if "epsilon" in extras else ""
        if extras.get("clients") == 0:
            notes.append(f"round {index}: Poisson sampling drew no client; the round changed "
                         f"nothing{noise}")
        elif extras.get("clients") and extras.get("reported") == 0:
            notes.append(f"round {index}: no sampled client reported; the round changed "
                         f"nothing{noise}")
        if extras.get("stopped"):
            notes.append(f"round {index}: stopped: the next round would spend more than "
                         f"--target-epsilon {self.config.target_epsilon:g} (epsilon now "
                         f"{extras.get('epsilon'):.3g})")
        return notes

    def summary_fields(self):
        c = self.config
        fields = {"rounds": c.rounds, "clients": c.clients,
                  "clients_per_round": c.sampled_clients, "local_epochs": c.local_epochs,
                  "partition": c.partition, "prox_mu": c.prox_mu,
                  "server_optimizer": c.server_optimizer,
                  "server_lr": self.server_optimizer().lr,
                  "server_momentum": c.server_momentum, "scaffold": c.scaffold,
                  "sampling": c.sampling, "dropout_rate": c.dropout_rate,
                  "straggler_rate": c.straggler_rate}
        if c.private:
            fields.update({"epsilon": self.last_epsilon, "dp_delta": dp_delta(c),
                           "dp_noise": c.dp_noise, "dp_clip": c.dp_clip,
                           "accountant": c.accountant or "rdp",
                           "target_epsilon": c.target_epsilon,
                           "stopped_for_privacy_at_round": self.stopped_for_privacy_at})
        return fields

    def describe(self, plan, model):
        c = self.config
        sample = f"{c.sampled_clients} per round" if c.sampling == "fixed" else \
            f"Poisson q={c.sample_rate:g} ({c.sampled_clients} expected per round)"
        lines = [f"{c.clients} clients ({c.partition}), {sample}, "
                 f"{c.local_epochs} local epoch(s) of batch {c.batch_size}, {c.rounds} rounds"]
        extras = []
        if c.prox_mu:
            extras.append(f"FedProx mu {c.prox_mu:g}")
        optimizer = self.server_optimizer()
        if c.server_optimizer != "sgd" or optimizer.lr != 1.0 or c.server_momentum:
            extras.append(optimizer.describe())
        if c.scaffold:
            place, need = self.controls_placement(model, plan)
            where = "in shared memory" if place == "shm" else \
                f"in a memory-mapped file {Path(self.out_dir) / CONTROLS_FILE}"
            extras.append(f"SCAFFOLD: client variates {need / 2**20:,.1f} MiB {where}")
        if c.dropout_rate or c.straggler_rate:
            extras.append(f"unreliable clients: {c.dropout_rate:g} drop out, "
                          f"{c.straggler_rate:g} straggle")
        if c.dp_clip is not None:
            clip = f"clip {c.dp_clip:g}" + (f" adapting to quantile {c.dp_clip_quantile:g}"
                                             if c.dp_clip_quantile is not None else "")
            if c.private:
                target = f", stop before epsilon {c.target_epsilon:g}" \
                    if c.target_epsilon is not None else ""
                extras.append(f"DP-FedAvg: {clip}, noise multiplier {c.dp_noise:g}, "
                              f"delta {dp_delta(c):g}, {c.accountant or 'rdp'} "
                              f"accountant{target}")
            else:
                extras.append(f"updates clipped ({clip}), no noise: no privacy guarantee")
        if c.client_eval_every:
            extras.append(f"every client evaluated every {c.client_eval_every} rounds")
        if c.accept_failures:
            extras.append("failing clients are dropped from their round")
        if plan.comm.shares_memory and not self.uses_shared_table(model, plan):
            extras.append("round results too large for a shared table: averaged per worker, "
                          "so the last bits depend on --workers")
        if extras:
            lines.append(" · ".join(extras))
        return lines


def param_numel(model) -> int:
    return sum(p.numel() for p in model.parameters())


def _free_bytes(path) -> int | None:
    try:
        stats = os.statvfs(path)
    except (OSError, TypeError):
        return None
    return stats.f_bavail * stats.f_frsize


def _existing_parent(path) -> Path:
    path = Path(path).resolve()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path
