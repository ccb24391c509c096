"""fedbuff's part of a checkpoint: fedavg's (the global model, the server optimizer's
state) and the updates in flight -- the rows trained and not yet applied, by dispatch
number. The schedule itself is a function of the seed and the settings: a resumed run
computes it again, puts the rows back where it says and continues the same events."""

from __future__ import annotations

import torch

from ...errors import UserError
from ..fedavg.checkpoint import load_server_state, server_state
from ..fedavg.shared import FedAvgShared


def step_state(shared: FedAvgShared, model, schedule, last_step: int) -> dict:
    """Rank 0's part after server step ``last_step``."""
    state = server_state(shared, 0, model, None, None)
    pending = schedule.pending_after(last_step)
    rows = [u.row for u in pending]
    state["fedbuff"] = {"step": last_step + 1,
                        "numbers": torch.tensor([u.number for u in pending], dtype=torch.int64),
                        "rows": shared.table[rows].clone(),
                        "weights": shared.weights[rows].clone()}
    return state


def check_in_flight(saved: dict | None, schedule, last_step: int) -> list:
    """The updates pending after ``last_step`` in this run's schedule, refused (in one line)
    when ``saved`` (a checkpoint's ``fedbuff`` part) does not hold exactly those: a setting
    that shapes the schedule was changed on resume. The parent asks before any worker
    starts (``FedBuffStrategy.resuming_from``)."""
    pending = schedule.pending_after(last_step)
    if saved is None or int(saved["step"]) != last_step + 1 \
            or saved["numbers"].tolist() != [u.number for u in pending]:
        raise UserError("the checkpoint's updates in flight are not this run's schedule's: "
                        "resume with the settings that shape it as they were (concurrency, "
                        "buffer size, max staleness, clients, partition, local epochs, "
                        "client speeds, availability, seed, and the epochs --personalize "
                        "fedrep or ditto adds)")
    return pending


def load_step_state(shared: FedAvgShared, state: dict, schedule, last_step: int) -> None:
    """Put ``state`` (``step_state``'s) back into the shared state: the server's, and each
    update in flight into the row the schedule gives it."""
    load_server_state(shared, state, None, None)
    saved = state.get("fedbuff")
    for position, update in enumerate(check_in_flight(saved, schedule, last_step)):
        shared.table[update.row].copy_(saved["rows"][position])
        shared.weights[update.row] = saved["weights"][position]
