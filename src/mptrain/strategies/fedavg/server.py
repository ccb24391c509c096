"""The server's step of a round, each rank on its slice of the columns: combine the round's
client updates into the global update (:func:`combine_updates`), apply the server optimizer,
move SCAFFOLD's ``c``; rank 0 also moves the adaptive clip and spends the privacy.

Without a shared table (ranks from torchrun) each rank averages its own clients and the
ranks combine their partial averages through the group (``reduce_through_group``); a robust
rule or an attack gathers the rows to rank 0 instead (``reduce_gathered``).
"""

from __future__ import annotations

from typing import Sequence

import torch

from ...federated import scaffold
from ...federated.aggregate import aggregate_rows, column_slice, sum_rows
from ...federated.privacy import count_noise, next_clip, noise_slice, private_mean
from .robust_worker import RobustWorker
from .gathered import GatheredTable
from .settings import clip_lr, count_noise_std, privacy_delta, updates_noise_multiplier
from .shared import FedAvgShared


def combine_updates(rows: torch.Tensor, weights: Sequence[float], global_flat: torch.Tensor,
                    clip: float | None, noise: torch.Tensor | None = None,
                    expected_clients: float | None = None) -> torch.Tensor | None:
    """The round's new global values for one slice of the columns (what the server
    optimizer steps towards), from the clients' rows of that slice in client-id order.

    ``rows[i]`` is client i's model, or with a ``clip`` its clipped update (model minus
    ``global_flat``, this slice of the global model); ``weights[i]`` is 0 for a client
    that failed, dropped out or sent a non-finite update. With DP (``noise`` given) every
    reporting client counts once and the noised sum is divided by the expected count, so
    that nothing released depends on who reported -- even when nobody did. Otherwise the
    weighted mean; None when no client reported (the round changes nothing)."""
    if noise is not None:
        return global_flat + private_mean(sum_rows(rows, weights), noise, expected_clients)
    if not any(w > 0 for w in weights):
        return None
    average = aggregate_rows(rows, weights)
    if clip is not None:   # clipped updates, not models: the average is x + mean
        average = global_flat + average
    return average


class ServerStep:
    """One rank's part of the server: its slice of the global model and server state."""

    def __init__(self, config, shared: FedAvgShared, group, server_optimizer, accountant,
                 robust: RobustWorker | None = None):
        self.config, self.shared, self.group = config, shared, group
        #: The robust rule and the attackers' server side (None: the mean, no attack).
        self.robust = robust
        self.server = server_optimizer
        #: Rank 0 speaks for the server: the privacy spent so far (None without DP).
        self.accountant = accountant
        self.param_numel = shared.controls.numel() if shared.controls is not None else 0

    def reduce_shared_table(self, round_index: int, sampled: list[int],
                            clip: float | None) -> dict:
        """Every rank aggregates its slice of the columns, in client-id order, and steps the
        server on it; barriers on both sides: all rows written before, all slices after.
        Returns rank 0's figures for the round's report (nothing on the others)."""
        shared, c, f, group = self.shared, self.config, self.config.fedavg, self.group
        rows = len(sampled)
        group.barrier()
        if self.robust is not None:
            return self._robust_step(sampled)
        weights = shared.weights[:rows].tolist()
        numel = shared.global_flat.numel()
        part = column_slice(numel, group.world_size, group.rank)
        params = shared.global_flat[part]
        state = {name: tensor[part] for name, tensor in shared.server_state.items()}
        noise = None
        if f.private:
            # Noise even when nobody reported: what is released must never depend on it.
            noise = noise_slice(numel, part, updates_noise_multiplier(f) * clip, c.seed,
                                round_index)
        target = combine_updates(shared.table[:rows, part], weights, params, clip, noise,
                                 f.sample_rate * f.clients)
        if target is not None:
            self.server.step_(params, target, state)
        if f.scaffold and any(w > 0 for w in weights):
            cpart = column_slice(self.param_numel, group.world_size, group.rank)
            scaffold.update_server_control_(
                shared.controls[cpart],
                sum_rows(shared.control_deltas[:rows, cpart], weights), f.clients)
        figures = self._server_scalars(round_index, rows, weights, clip) \
            if group.rank == 0 else {}
        group.barrier()
        return figures

    def _robust_step(self, sampled: list[int]) -> dict:
        """The robust rule (and ALIE's forging) instead of the mean: my slice of the
        aggregate (the rule's barriers inside), the server step on it, then the closing
        barrier. DP and SCAFFOLD are refused with a robust rule or an attack."""
        shared, group = self.shared, self.group
        part = column_slice(shared.global_flat.numel(), group.world_size, group.rank)
        target, figures = self.robust.aggregate(
            shared.table, shared.weights[:len(sampled)].tolist(), sampled,
            shared.global_flat, part, group.rank, group.barrier)
        if target is not None:
            state = {name: tensor[part] for name, tensor in shared.server_state.items()}
            self.server.step_(shared.global_flat[part], target, state)
        group.barrier()
        return figures if group.rank == 0 else {}

    def reduce_gathered(self, gathered: GatheredTable, sampled: list[int],
                        owners: list[int]) -> dict:
        """Without a shared table, with a robust rule or an attack: the rows gathered to
        rank 0, the rule applied there to every column, the aggregate sent to every rank
        (nothing when the round is skipped), and every rank's server step on it. Returns
        rank 0's figures for the round's report (nothing on the others)."""
        shared, group = self.shared, self.group
        gathered.gather(group, owners)
        moved = torch.zeros(1, dtype=torch.float64)
        target, figures = None, {}
        if group.rank == 0:
            numel = shared.global_flat.numel()
            target, figures = self.robust.aggregate(
                gathered.table, gathered.weights[:len(sampled)].tolist(), sampled,
                shared.global_flat, slice(0, numel), 0, lambda: None)
            moved[0] = float(target is not None)
        group.broadcast_([moved], src=0)
        if moved[0] > 0:
            if target is None:
                target = torch.empty_like(shared.global_flat)
            group.broadcast_([target], src=0)
            self.server.step_(shared.global_flat, target, shared.server_state)
        return figures

    def _server_scalars(self, round_index, rows, weights, clip) -> dict:
        """Rank 0's part of the server step: the adaptive clip, the privacy spent and
        whether the next round would spend more than the target."""
        c, f, shared = self.config, self.config.fedavg, self.shared
        out = {}
        if clip is not None:
            out["dp_clip"] = clip
        if f.dp_clip_quantile is not None:
            within = sum(shared.within[slot].item() for slot in range(rows)
                         if weights[slot] > 0)
            noise = count_noise(count_noise_std(f), c.seed, round_index) if f.private else 0.0
            shared.clip[0] = next_clip(clip, within, f.sample_rate * f.clients,
                                       f.dp_clip_quantile, clip_lr(f), noise)
        if f.private:
            self.accountant.spend(f.sample_rate, f.dp_noise)
            delta = privacy_delta(f)
            out["epsilon"] = self.accountant.epsilon(delta)
            stop = f.target_epsilon is not None and round_index + 1 < f.rounds and \
                self.accountant.epsilon_after(f.sample_rate, f.dp_noise, delta) \
                > f.target_epsilon
            shared.privacy[0], shared.privacy[1] = out["epsilon"], float(stop)
            out["privacy_stop"] = stop
        return out

    def privacy_stop(self) -> bool:
        """Whether rank 0 said the next round would spend more than --target-epsilon."""
        privacy = self.shared.privacy
        return privacy is not None and bool(privacy[1] > 0)

    def reduce_through_group(self, partial: torch.Tensor | None, weight: float) -> None:
        """Without a shared table: this rank's weighted sum of its clients' models and their
        weight, combined with the other ranks' through the group, then the server step."""
        shared = self.shared
        if partial is None:
            partial = torch.zeros_like(shared.global_flat)
        average = partial / weight if weight else partial
        total = self.group.weighted_average_([average], weight)
        if total > 0:
            self.server.step_(shared.global_flat, average, shared.server_state)
