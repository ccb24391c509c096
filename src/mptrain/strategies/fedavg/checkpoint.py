"""fedavg's part of a checkpoint: the global model and every piece of server state (and
with --personalize the clients' personal state; the rest -- which clients a round samples,
their seeds -- is a function of the seed), and how a resumed run puts it back into the
shared state."""

from __future__ import annotations

import torch

from ...checkpoint import model_snapshot
from .shared import FedAvgShared


def server_state(shared: FedAvgShared, rank: int, model, accountant,
                 client_controls) -> dict:
    """Rank ``rank``'s part: rank 0's is the whole server; without a shared table every
    rank keeps its own server optimizer state, so each saves it."""
    if rank != 0 and shared.shared_table:
        return {}
    state = {"server": {k: v.clone() for k, v in shared.server_state.items()}}
    if "velocity" in shared.server_state:
        state["server_velocity"] = shared.server_state["velocity"].clone()
    if rank != 0:
        return state
    state["model"] = model_snapshot(model)
    if shared.clip is not None:
        state["dp_clip"] = shared.clip.clone()
    if accountant is not None:
        state["accountant"] = accountant.state_dict()
    if shared.controls is not None:
        ids = torch.nonzero(shared.touched).flatten()
        state["scaffold"] = {"c": shared.controls.clone(), "clients": ids,
                             "c_i": client_controls[ids].clone()}
    if shared.personal is not None:   # --personalize: every trained client's state
        state["personal"] = shared.personal.state()
    return state


def load_server_state(shared: FedAvgShared, state: dict, accountant,
                      client_controls) -> None:
    """Put ``state`` (as ``server_state`` wrote it, or as checkpoints before issue 22 did)
    back. The global model came back through the parent's model; rank 0 writes the shared
    server state, the others read it after the round's first barrier."""
    server = state.get("server")
    if server is None and "server_velocity" in state:   # checkpoints before issue 22
        server = {"velocity": state["server_velocity"]}
    for name, saved in (server or {}).items():
        if name in shared.server_state:
            shared.server_state[name].copy_(saved)
    if "dp_clip" in state and shared.clip is not None:
        shared.clip.copy_(state["dp_clip"])
    if "accountant" in state and accountant is not None:
        accountant.load_state_dict(state["accountant"])
    saved = state.get("scaffold")
    if saved is not None and shared.controls is not None:
        shared.controls.copy_(saved["c"])
        client_controls[saved["clients"]] = saved["c_i"]
        shared.touched[saved["clients"]] = 1
    if "personal" in state and shared.personal is not None:
        shared.personal.load_state(state["personal"])
