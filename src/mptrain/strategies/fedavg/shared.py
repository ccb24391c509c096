"""What fedavg's workers share, as one value: :class:`FedAvgShared`, made by the parent
(``share_round_state``) and handed to every worker's program.

A client is an index slice of the one shared data set (``client_index`` cut at
``client_offsets``). One round's results go into a table of one row per sampled client, in
shared memory when every rank maps it (``uses_shared_table``); the global model, the server
optimizer's state, SCAFFOLD's variates, the adaptive clip and the privacy spent are shared
tensors too. The tensors are written in place and never replaced, so the value itself never
changes after the parent made it; who writes which part, and why no lock is needed, is told
in ``worker``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from ...errors import UserError
from ...errors import setting_name as named   # as the caller spelled the setting
from ...data.shared import shared_zeros
from ...files import existing_parent, free_bytes
from ...leftovers import CLIENT_CONTROLS_FILE
from ...federated.sampling import poisson_capacity
from ..model_state import floating_state
from .decision_cell import DecisionCell
from .personal_setup import make_store, store_memory_bytes
from .settings import robust_settings_of, server_optimizer

#: Above this, the table of one round's client results is not kept in shared memory; the
#: workers then reduce per worker (results then depend on the number of workers, in the
#: last bits).
TABLE_LIMIT_BYTES = 1 << 30
#: Where SCAFFOLD's client variates go when /dev/shm cannot hold them (under --out).
CONTROLS_FILE = CLIENT_CONTROLS_FILE
#: Of /dev/shm's free space, what the client variates may take (the rest: data, model,
#: collectives, other runs).
SHM_SHARE = 0.5


@dataclass(frozen=True, eq=False)   # one value by identity: tensors do not compare as bools
class FedAvgShared:
    """Everything fedavg's workers share (tensors written in place, never replaced)."""

    client_index: torch.Tensor      # every client's samples, one client after another
    client_offsets: torch.Tensor    # [clients + 1]
    global_flat: torch.Tensor       # the global model, flat (parameters, floating buffers)
    server_state: dict[str, torch.Tensor]   # the server optimizer's
    rows: int                       # rows of a round's table: clients a round may sample
    #: Whether one round's results go through ``table`` (else each rank averages its own
    #: clients and the ranks combine through the group's collective).
    shared_table: bool
    table: torch.Tensor | None = None        # [rows, numel] one round's results
    weights: torch.Tensor | None = None      # [rows] weight of each row (0: none)
    within: torch.Tensor | None = None       # [rows] DP: update within the clip
    clip: torch.Tensor | None = None         # [1] float64: DP clip (adaptive)
    privacy: torch.Tensor | None = None      # [2] float64: epsilon, stop flag
    controls: torch.Tensor | None = None     # SCAFFOLD's c [params]
    control_deltas: torch.Tensor | None = None   # [rows, params] the clients' dc_i
    touched: torch.Tensor | None = None      # [clients] uint8: c_i ever set
    #: A row-wise robust rule's decision, rank 0 to the others (``RobustWorker``).
    decision_cell: DecisionCell | None = None
    #: SCAFFOLD's client variates c_i [clients, params] in shared memory, or None when
    #: they live in ``controls_path`` (a file each process maps: ``client_controls``).
    client_controls_in_memory: torch.Tensor | None = field(default=None, repr=False)
    controls_path: Path | None = None
    #: --personalize: every client's personal state (``federated.personal.store``).
    personal: object | None = None

    def client_controls(self) -> torch.Tensor | None:
        """SCAFFOLD's table of client variates ``c_i`` [clients, params]: shared memory, or
        the file mapped ``MAP_SHARED`` (writes of one process are seen by all). A worker
        calls this once and keeps the tensor; a file is never pickled, only its path."""
        if self.controls_path is None:
            return self.client_controls_in_memory
        rows, params = self.touched.numel(), self.controls.numel()
        return torch.from_file(str(self.controls_path), shared=True, size=rows * params,
                               dtype=torch.float32).view(rows, params)

    def client_indices(self, client: int) -> torch.Tensor:
        """The samples of ``client`` (indices into the training set)."""
        return self.client_index[self.client_offsets[client]:self.client_offsets[client + 1]]

    def client_sizes(self) -> list[int]:
        return (self.client_offsets[1:] - self.client_offsets[:-1]).tolist()


def cut_clients(config, data) -> tuple[torch.Tensor, torch.Tensor]:
    """The training set cut into clients: every client's indices one after another, and
    where each client starts ([clients + 1])."""
    from ...data.partitions import cut_training_set   # natural clients: the data's own

    return cut_training_set(config.fedavg.partition, data, config.fedavg.clients, config.seed)


def share_round_state(config, model, clients: tuple[torch.Tensor, torch.Tensor], plan,
                      out_dir: Path | None) -> FedAvgShared:
    """The shared state of a run, made in the parent before any worker starts (under
    torchrun in every rank): ``clients`` is ``cut_clients``'s cut."""
    f = config.fedavg
    client_index, client_offsets = clients
    shared_table = uses_shared_table(config, model, plan)
    flat = torch.cat([t.detach().reshape(-1).float() for t in floating_state(model)])
    rows = table_rows(config)
    parts: dict = {}
    if shared_table:   # only when workers share memory (``uses_shared_table``)
        parts["table"] = shared_zeros((rows, flat.numel()))
        parts["weights"] = torch.zeros(rows, dtype=torch.float64)
    if f.dp_clip is not None:
        parts["within"] = torch.zeros(rows, dtype=torch.float64)
        parts["clip"] = torch.tensor([float(f.dp_clip)], dtype=torch.float64)
    if f.private:
        from ...federated.accounting import require_dp_accounting

        require_dp_accounting()   # imported once here: forked workers inherit it
        parts["privacy"] = torch.zeros(2, dtype=torch.float64)
    if f.scaffold:
        params = param_numel(model)
        parts["controls"] = torch.zeros(params)
        parts["control_deltas"] = torch.zeros(rows, params)
        parts["touched"] = torch.zeros(f.clients, dtype=torch.uint8)
        place, path = _client_controls_place(config, model, plan, out_dir)
        parts["controls_path"] = path
        if place == "shm":
            shape = (f.clients, params)
            parts["client_controls_in_memory"] = shared_zeros(shape) \
                if plan.comm.shares_memory else torch.zeros(shape)
    if _needs_decision_cell(config):
        parts["decision_cell"] = DecisionCell(rows)
    parts["personal"] = make_store(config, model, plan, out_dir)
    shared = FedAvgShared(client_index=client_index, client_offsets=client_offsets,
                          global_flat=flat,
                          server_state=server_optimizer(f).init_state(flat.numel()),
                          rows=rows, shared_table=shared_table, **parts)
    if plan.comm.shares_memory:
        small = [parts[k] for k in ("weights", "within", "clip", "privacy", "controls",
                                    "control_deltas", "touched")
                 if k in parts]
        if "decision_cell" in parts:
            small.append(parts["decision_cell"].tensor)
        for tensor in [client_index, client_offsets, flat, *shared.server_state.values(),
                       *small]:
            tensor.share_memory_()
    return shared


def _client_controls_place(config, model, plan, out_dir) -> tuple[str, Path | None]:
    place, need = controls_placement(config, model, out_dir)
    if place == "shm":
        return place, None
    out_dir.mkdir(parents=True, exist_ok=True)
    path = Path(out_dir) / CONTROLS_FILE
    with open(path, "wb") as handle:
        handle.truncate(need)   # a sparse file of zeros; a restart starts it afresh
    return place, path


def table_rows(config) -> int:
    """Rows of the round's table: the clients a round samples, over-selected ones included
    (a bound on Poisson's count)."""
    f = config.fedavg
    if f.sampling == "poisson":
        return poisson_capacity(f.clients, f.sample_rate)
    return f.selected_clients


def uses_shared_table(config, model, plan) -> bool:
    """Whether one round's results fit a table every rank maps."""
    numel = sum(t.numel() for t in floating_state(model))
    return plan.comm.shares_memory and table_rows(config) * numel * 4 <= TABLE_LIMIT_BYTES


def controls_placement(config, model, out_dir: Path | None) -> tuple[str, int]:
    """Where SCAFFOLD's client variates go -- ``shm`` or ``file`` (under --out) -- and
    their bytes; a refusal with the figures when neither has room."""
    need = config.fedavg.clients * param_numel(model) * 4
    shm_free = free_bytes("/dev/shm")
    if shm_free is None or need <= SHM_SHARE * shm_free:
        return "shm", need
    disk_free = free_bytes(existing_parent(out_dir)) if out_dir is not None else None
    if disk_free is not None and need <= disk_free:
        return "file", need
    shm = f"{shm_free / 2**20:,.0f} MiB free in /dev/shm (half usable)"
    disk = f"{disk_free / 2**20:,.0f} MiB free under {named('out')}" \
        if disk_free is not None else f"no {named('out')} folder to map a file in"
    raise UserError(f"SCAFFOLD's client variates need {need / 2**20:,.0f} MiB "
                    f"({config.fedavg.clients} clients x {param_numel(model):,} "
                    f"parameters x 4 bytes): {shm}, {disk}; give {named('out')} on a disk "
                    f"with room, or fewer {named('clients')}")


def shared_bytes(config, model, plan, out_dir: Path | None) -> int:
    """Bytes of /dev/shm the shared state takes beyond the model and data (for the
    memory preflight)."""
    f = config.fedavg
    numel = sum(t.numel() for t in floating_state(model))
    extra = 4 * numel * len(server_optimizer(f).init_state(0))
    if plan.comm.shares_memory and uses_shared_table(config, model, plan):
        extra += table_rows(config) * (numel * 4 + 16)
    if f.scaffold:
        params = param_numel(model)
        extra += 4 * params * (table_rows(config) + 1) + f.clients
        try:
            place, need = controls_placement(config, model, out_dir)
        except UserError:
            place, need = "none", 0     # ``check`` refuses it, with the figures
        extra += need if place == "shm" else 0
    if _needs_decision_cell(config):
        extra += DecisionCell(table_rows(config)).tensor.nbytes
    return extra + store_memory_bytes(config, model, out_dir)


def _needs_decision_cell(config) -> bool:
    robust = robust_settings_of(config)
    return robust.active and robust.rule.row_wise


def param_numel(model) -> int:
    return sum(p.numel() for p in model.parameters())

