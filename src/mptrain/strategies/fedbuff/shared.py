"""What fedbuff's workers share: fedavg's :class:`~..fedavg.shared.FedAvgShared` with a
pending table of ``concurrency + buffer_size`` rows -- the updates trained and not yet
applied, each a client's change from the version it started from -- and its weights.

A row is written by the one worker that trains its update, before the step's first barrier,
and read by every rank (its slice of the columns) between the two barriers of the step that
applies it; the schedule gives a row to one pending update at a time, so no write ever meets
a read without a barrier between them. A client's personal state (--personalize) is written
by the one worker that trains all of that client's updates of a step (``worker``), and read
after the step's barriers."""

from __future__ import annotations

from pathlib import Path

import torch

from ...data.shared import shared_zeros
from ..fedavg.personal_setup import make_store, store_memory_bytes
from ..fedavg.settings import server_optimizer
from ..fedavg.shared import FedAvgShared
from ..model_state import floating_state
from .settings import buffer_size_of, concurrency_of


def table_rows(config) -> int:
    f = config.fedavg
    return concurrency_of(f) + buffer_size_of(f)


def share_async_state(config, model, clients: tuple[torch.Tensor, torch.Tensor], plan,
                      out_dir: Path | None) -> FedAvgShared:
    """Made in the parent before any worker starts (fedbuff's workers share one machine's
    memory: it does not run under torchrun); with --personalize the clients' personal
    store, as fedavg's."""
    client_index, client_offsets = clients
    flat = torch.cat([t.detach().reshape(-1).float() for t in floating_state(model)])
    rows = table_rows(config)
    shared = FedAvgShared(client_index=client_index, client_offsets=client_offsets,
                          global_flat=flat,
                          server_state=server_optimizer(config.fedavg).init_state(flat.numel()),
                          rows=rows, shared_table=True,
                          table=shared_zeros((rows, flat.numel())),
                          weights=torch.zeros(rows, dtype=torch.float64),
                          personal=make_store(config, model, plan, out_dir))
    for tensor in (client_index, client_offsets, flat, shared.weights,
                   *shared.server_state.values()):
        tensor.share_memory_()
    return shared


def table_bytes(config, model, out_dir: Path | None) -> int:
    """/dev/shm the table, its weights, the server state and the personal store's part in
    memory take (the memory preflight)."""
    numel = sum(t.numel() for t in floating_state(model))
    state = len(server_optimizer(config.fedavg).init_state(0))
    return table_rows(config) * (4 * numel + 8) + 4 * numel * state \
        + store_memory_bytes(config, model, out_dir)
