"""One fedavg worker's program. A round reads top to bottom as the algorithm does:

1. sample the round's clients (fixed-size, or Poisson with DP) and take my share of them;
2. train each from the global model -- FedProx's or SCAFFOLD's correction, stragglers doing
   part of their steps -- and put its result in its row of the shared table, unless it
   dropped out, failed or sent a non-finite update (then its row weighs 0); with DP the row
   is the client's update clipped to the clip;
3. barrier; aggregate my slice of the columns (weighted mean, or with DP the sum plus noise
   over the expected count) and apply the server optimizer to my slice of the global model;
   SCAFFOLD's ``c`` moves by the clients' ``dc_i``; rank 0 also updates the adaptive clip and
   the privacy spent;
4. barrier; every N rounds, evaluate the global model on every client's data.

Shared state without locks, and why it is safe: a row of the table, of ``dc`` and of the
client variates is written by the one worker that trains that client in the round; the
global model, the server state and ``c`` are written only between the two barriers, each
column by one rank, and read by others only after the second; the clip and the privacy cell
are written by rank 0 between the barriers and read after the next barrier (each rank keeps
the round's clip from before the first). The barriers of the shared-memory group order the
writes before them with the reads after them on every CPU (they are built on a lock and a
condition, which are full memory barriers, also on aarch64).
"""

from __future__ import annotations

import copy
import math
import time

import torch
import torch.nn as nn

from ..checkpoint import model_snapshot
from ..data.device_feed import feed_for
from ..data.sources import CLASSIFICATION
from ..engine.channels_last import ChannelsLastTraining
from ..engine.optim import build_optimizer
from ..engine.precision import in_precision
from ..engine.schedule import learning_rate
from ..engine.seeding import seed_global_generator
from ..engine.step import train_step
from ..engine.task import evaluate
from ..errors import ClientFailedError
from ..federated import availability, scaffold
from ..federated.accounting import PrivacyAccountant
from ..federated.aggregate import aggregate_rows, column_slice, sum_rows
from ..federated.client import add_proximal_gradient_, full_steps, update_is_finite
from ..federated.client_stats import summarize
from ..federated.privacy import clip_, count_noise, next_clip, noise_slice, private_mean
from ..federated.sampling import assign_clients, client_seed, poisson_sample, sample_clients
from .base import RoundWork, WorkerProgram
from .data_parallel import copy_model_state, floating_state
from .fedavg import param_numel
from .fedavg_settings import (DEFAULT_CLIP_LR, count_noise_std, dp_delta,
                              dp_noise_of_updates)


class FedAvgProgram(WorkerProgram):
    """One worker: each round, train my share of the sampled clients, then aggregate."""

    def __init__(self, strategy, setup):
        self.strategy, self.setup, self.config = strategy, setup, strategy.config
        self.group = setup.group
        self.model = copy.deepcopy(setup.model).to(setup.device)
        # Private to this worker: it may change layout (the global model stays as it is).
        self.layout = ChannelsLastTraining(self.model, setup.device)
        self.forward = in_precision(self.layout.forward, strategy.config.precision,
                                    setup.device)
        self.feed = feed_for(setup.data.train, setup.device, setup.group.world_size)
        self.tensors = floating_state(self.model)
        # The server averages floating state only and never changes integer buffers
        # (BatchNorm's num_batches_tracked): the global model's are those of the model it
        # started from, taken here, and every client starts from them rather than from the
        # count its worker's previous clients left.
        self.integer_buffers = [(buffer, buffer.clone()) for buffer in self.model.buffers()
                                if not buffer.is_floating_point()]
        self.params = list(self.model.parameters())
        c = self.config
        self.optimizer = build_optimizer(self.params, c.optimizer, c.lr, c.momentum,
                                         c.weight_decay)
        self.server = strategy.server_optimizer()
        offsets = strategy.client_offsets
        self.sizes = (offsets[1:] - offsets[:-1]).tolist()
        # Views of the shared global model, one per tensor: the server updates it in place,
        # so they stay valid for the whole run.
        sizes = [t.numel() for t in self.tensors]
        self.global_views = [view.view_as(t) for view, t in
                             zip(strategy.global_flat.split(sizes), self.tensors)]
        # The shared global model lives in host memory; a client on a GPU needs its own
        # copies of what it reads every step (FedProx's anchor, SCAFFOLD's correction).
        self.on_host = setup.device.type == "cpu"
        self.global_params = self.global_views[:len(self.params)]   # FedProx's anchor
        if c.prox_mu and not self.on_host:
            self.global_params = [torch.empty_like(p) for p in self.params]
        self.prox_scratch = [torch.empty_like(p) for p in self.params] if c.prox_mu else None
        self.param_numel = param_numel(self.model)
        if c.scaffold:
            self.correction = torch.empty(self.param_numel)
            self.correction_on_device = self.correction if self.on_host \
                else torch.empty(self.param_numel, device=setup.device)
            self.correction_views = [v.view_as(p) for v, p in zip(
                self.correction_on_device.split([p.numel() for p in self.params]),
                self.params)]
        self.correct_gradients = self._correct_gradients if c.prox_mu or c.scaffold else None
        # Rank 0 speaks for the server: the privacy spent so far.
        self.accountant = PrivacyAccountant(c.accountant or "rdp") if c.private else None
        self._load_global()

    # -- one round -------------------------------------------------------------------------------
    def train_round(self, round_index: int) -> RoundWork:
        c, group, strategy = self.config, self.group, self.strategy
        sampled = self._sample(round_index)
        slots = {client: slot for slot, client in enumerate(sampled)}
        mine = assign_clients(sampled, self.sizes, group.world_size)[group.rank]
        clip = float(strategy.clip[0]) if strategy.clip is not None else None
        started = time.monotonic()
        tally = RoundTally()
        partial_sum, partial_weight = None, 0.0
        for client in mine:
            row = strategy.table[slots[client]] if strategy.shared_table else None
            weight = self._run_client(client, round_index, clip, row, slots[client], tally)
            if strategy.shared_table:
                strategy.weights[slots[client]] = weight
            elif weight:
                result = self._flat_result()
                partial_sum = result * weight if partial_sum is None else \
                    partial_sum.add_(result, alpha=weight)
                partial_weight += weight
        ended = time.monotonic()
        server = {}
        if strategy.shared_table:
            server = self._reduce_shared_table(round_index, len(sampled), clip)
        else:
            self._reduce_through_group(partial_sum, partial_weight)
        self._load_global()
        if c.client_eval_every and ((round_index + 1) % c.client_eval_every == 0
                                    or round_index + 1 == c.rounds):
            server.update(self._evaluate_clients())
        extras = {"clients": len(mine), **tally.as_extras(), **server}
        return RoundWork(steps=tally.steps, samples=tally.samples, loss_sum=tally.loss_sum,
                         started=started, ended=ended, extras=extras,
                         last=bool(server.get("privacy_stop")) if group.rank == 0
                         else self._privacy_stop())

    def _sample(self, round_index: int) -> list[int]:
        c = self.config
        if c.sampling == "poisson":
            sampled = poisson_sample(c.clients, c.sample_rate, c.seed, round_index)
            if len(sampled) > self.strategy.table_rows():   # < 1e-20 per round
                raise ClientFailedError(f"round {round_index + 1} sampled {len(sampled)} "
                                        "clients, more than the table holds")
            return sampled
        return sample_clients(c.clients, c.sampled_clients, c.seed, round_index)

    def _run_client(self, client: int, round_index: int, clip: float | None,
                    row: torch.Tensor | None, slot: int, tally: "RoundTally") -> float:
        """Train ``client``, put its result in ``row``; returns its weight in the aggregate
        (0: it dropped out, failed or sent a non-finite update)."""
        c, strategy = self.config, self.strategy
        self._load_global()
        try:
            steps, samples, loss = self._train_client(client, round_index)
        except Exception as err:  # noqa: BLE001 - a client's failure is reported by id
            if not c.accept_failures:
                raise ClientFailedError(
                    f"client {client} failed in round {round_index + 1} on worker rank "
                    f"{self.group.rank}: {type(err).__name__}: {err} (--accept-failures "
                    "drops failing clients from their round instead)") from err
            tally.failed.append(client)
            return 0.0
        result = self._flat_result(out=row)
        if not (math.isfinite(loss) and update_is_finite(result)):
            # Dropped and counted, and its loss kept out of the round's: one bad client is
            # not the run diverging.
            tally.nonfinite.append(client)
            return 0.0
        tally.count(steps, samples, loss, partial=steps < self._full_steps(client))
        if availability.drops_out(c.seed, round_index, client, c.dropout_rate):
            tally.dropped += 1     # trained, never reported: nothing of it is kept
            return 0.0
        tally.reported += 1
        if c.scaffold:
            self._update_client_control(client, result, steps, round_index, slot)
        if clip is None:
            return float(samples)
        # Clipping is the client's: the server only ever sees a bounded update.
        result.sub_(strategy.global_flat)
        norm = clip_(result, clip)
        strategy.within[slot] = 1.0 if norm <= clip else 0.0
        return 1.0 if c.private else float(samples)

    def _full_steps(self, client: int) -> int:
        return full_steps(self.sizes[client], self.config.batch_size, self.config.local_epochs)

    def _train_client(self, client: int, round_index: int) -> tuple[int, int, float]:
        c, setup = self.config, self.setup
        strategy = self.strategy
        start, end = strategy.client_offsets[client].item(), \
            strategy.client_offsets[client + 1].item()
        indices = strategy.client_index[start:end]
        generator = torch.Generator().manual_seed(client_seed(c.seed, round_index, client))
        seed_global_generator(client_seed(c.seed, round_index, client), setup.device)
        budget = availability.local_steps(c.seed, round_index, client, c.straggler_rate,
                                          self._full_steps(client))
        self.optimizer.state.clear()  # a fresh optimizer for every client
        for group in self.optimizer.param_groups:
            group["lr"] = self._client_lr(round_index)
        if c.scaffold:
            scaffold.drift_correction(strategy.controls, strategy.client_controls[client],
                                      out=self.correction)
            if not self.on_host:
                self.correction_on_device.copy_(self.correction)
        self.model.train()
        steps, samples = 0, 0
        loss_sum = torch.zeros((), dtype=torch.float64, device=setup.device)
        for _ in range(c.local_epochs):
            order = indices[torch.randperm(len(indices), generator=generator)]
            for _, batch, inputs, targets in self.feed.batches(
                    enumerate(torch.split(order, c.batch_size))):
                if steps == budget:
                    break   # a straggler stops here
                loss = train_step(self.forward, self.optimizer, inputs, targets,
                                  setup.data.task, self.correct_gradients)
                loss_sum += loss * len(batch)
                setup.progress.advance(len(batch))
                samples += len(batch)
                steps += 1
        return steps, samples, float(loss_sum)

    def _correct_gradients(self) -> None:
        """FedProx's proximal term and SCAFFOLD's drift correction, after backward."""
        if self.config.prox_mu:
            add_proximal_gradient_(self.params, self.global_params, self.config.prox_mu,
                                   self.prox_scratch)
        if self.config.scaffold:
            scaffold.add_correction_(self.params, self.correction_views)

    def _client_lr(self, round_index: int) -> float:
        c = self.config
        return learning_rate(c.lr_schedule, c.lr, c.lr_decay, round_index, 0, 1)

    def _update_client_control(self, client, result, steps, round_index, slot) -> None:
        strategy, p = self.strategy, self.param_numel
        scaffold.update_client_control_(
            strategy.client_controls[client], strategy.controls,
            strategy.global_flat[:p], result[:p], steps, self._client_lr(round_index),
            delta_out=strategy.control_deltas[slot])
        strategy.touched[client] = 1

    # -- the server, one slice per rank ----------------------------------------------------------
    def _reduce_shared_table(self, round_index: int, rows: int, clip: float | None) -> dict:
        """Every rank aggregates its slice of the columns, in client-id order, and steps the
        server on it; barriers on both sides: all rows written before, all slices after."""
        strategy, c, group = self.strategy, self.config, self.group
        group.barrier()
        weights = strategy.weights[:rows].tolist()
        numel = strategy.global_flat.numel()
        part = column_slice(numel, group.world_size, group.rank)
        params = strategy.global_flat[part]
        state = {name: tensor[part] for name, tensor in strategy.server_state.items()}
        if c.private:
            # Noise even when nobody reported: what is released must never depend on it.
            noise = noise_slice(numel, part, dp_noise_of_updates(c) * clip, c.seed,
                                round_index)
            mean = private_mean(sum_rows(strategy.table[:rows, part], weights), noise,
                                c.sample_rate * c.clients)
            self.server.step_(params, params + mean, state)
        elif any(w > 0 for w in weights):
            average = aggregate_rows(strategy.table[:rows, part], weights)
            if clip is not None:   # clipped updates, not models: the average is x + mean
                average = params + average
            self.server.step_(params, average, state)
        if c.scaffold and any(w > 0 for w in weights):
            cpart = column_slice(self.param_numel, group.world_size, group.rank)
            scaffold.update_server_control_(
                strategy.controls[cpart],
                sum_rows(strategy.control_deltas[:rows, cpart], weights), c.clients)
        server = self._server_scalars(round_index, rows, weights, clip) \
            if group.rank == 0 else {}
        group.barrier()
        return server

    def _server_scalars(self, round_index, rows, weights, clip) -> dict:
        """Rank 0's part of the server step: the adaptive clip, the privacy spent and
        whether the next round would spend more than the target."""
        c, strategy = self.config, self.strategy
        out = {}
        if clip is not None:
            out["dp_clip"] = clip
        if c.dp_clip_quantile is not None:
            within = sum(strategy.within[slot].item() for slot in range(rows)
                         if weights[slot] > 0)
            noise = count_noise(count_noise_std(c), c.seed, round_index) if c.private else 0.0
            strategy.clip[0] = next_clip(clip, within, c.sample_rate * c.clients,
                                         c.dp_clip_quantile, c.dp_clip_lr or DEFAULT_CLIP_LR,
                                         noise)
        if c.private:
            self.accountant.spend(c.sample_rate, c.dp_noise)
            delta = dp_delta(c)
            out["epsilon"] = self.accountant.epsilon(delta)
            stop = c.target_epsilon is not None and round_index + 1 < c.rounds and \
                self.accountant.epsilon_after(c.sample_rate, c.dp_noise, delta) \
                > c.target_epsilon
            strategy.privacy[0], strategy.privacy[1] = out["epsilon"], float(stop)
            out["privacy_stop"] = stop
        return out

    def _privacy_stop(self) -> bool:
        privacy = self.strategy.privacy
        return privacy is not None and bool(privacy[1] > 0)

    def _reduce_through_group(self, partial, weight) -> None:
        strategy = self.strategy
        if partial is None:
            partial = torch.zeros_like(strategy.global_flat)
        average = partial / weight if weight else partial
        total = self.group.weighted_average_([average], weight)
        if total > 0:
            self.server.step_(strategy.global_flat, average, strategy.server_state)

    def _evaluate_clients(self) -> dict:
        """The global model on every client's own data, each rank a run of clients; rank 0
        summarises after a barrier."""
        strategy, setup, group, c = self.strategy, self.setup, self.group, self.config
        if setup.data.task != CLASSIFICATION:
            return {}
        mine = column_slice(c.clients, group.world_size, group.rank)
        offsets = strategy.client_offsets
        for client in range(mine.start, mine.stop):
            indices = strategy.client_index[offsets[client]:offsets[client + 1]]
            _, correct, count = evaluate(self.model, self.feed, indices,
                                         setup.data.task, c.eval_batch_size, setup.device,
                                         beat=setup.progress.beat, precision=c.precision)
            strategy.client_accuracy[client] = correct / count if count else float("nan")
        group.barrier()
        return summarize(strategy.client_accuracy) if group.rank == 0 else {}

    # -- model and state -------------------------------------------------------------------------
    def _flat_result(self, out: torch.Tensor | None = None) -> torch.Tensor:
        """This client's model (parameters and floating buffers) as one flat vector, in host
        memory (where the server aggregates)."""
        pieces = [t.detach().reshape(-1) for t in self.tensors]
        if self.on_host:
            return torch.cat(pieces, out=out)
        flat = torch.cat(pieces)
        return flat.cpu() if out is None else out.copy_(flat)

    def _load_global(self) -> None:
        """Make the worker's model the global model (parameters and all buffers)."""
        with torch.no_grad():
            for tensor, view in zip(self.tensors, self.global_views):
                tensor.copy_(view)
            for buffer, global_value in self.integer_buffers:
                buffer.copy_(global_value)
            if self.config.prox_mu and not self.on_host:
                for anchor, param in zip(self.global_params, self.params):
                    anchor.copy_(param)

    def eval_model(self) -> nn.Module:
        return self.model

    def state(self) -> dict:
        """Rank 0's: the model and every piece of server state (the rest is a function of
        the seed). Without shared memory every rank keeps its own server state."""
        strategy = self.strategy
        if self.group.rank != 0 and strategy.shared_table:
            return {}
        state = {"server": {k: v.clone() for k, v in strategy.server_state.items()}}
        if "velocity" in strategy.server_state:
            state["server_velocity"] = strategy.server_state["velocity"].clone()
        if self.group.rank != 0:
            return state
        state["model"] = model_snapshot(self.model)
        if strategy.clip is not None:
            state["dp_clip"] = strategy.clip.clone()
        if self.accountant is not None:
            state["accountant"] = self.accountant.state_dict()
        if strategy.controls is not None:
            ids = torch.nonzero(strategy.touched).flatten()
            state["scaffold"] = {"c": strategy.controls.clone(), "clients": ids,
                                 "c_i": strategy.client_controls[ids].clone()}
        return state

    def load_state(self, state: dict) -> None:
        # The global model came back through the parent's model. Rank 0 writes the shared
        # server state; the others read it after the round's first barrier.
        strategy = self.strategy
        server = state.get("server")
        if server is None and "server_velocity" in state:   # checkpoints before issue 22
            server = {"velocity": state["server_velocity"]}
        for name, saved in (server or {}).items():
            if name in strategy.server_state:
                strategy.server_state[name].copy_(saved)
        if "dp_clip" in state and strategy.clip is not None:
            strategy.clip.copy_(state["dp_clip"])
        if "accountant" in state and self.accountant is not None:
            self.accountant.load_state_dict(state["accountant"])
        saved = state.get("scaffold")
        if saved is not None and strategy.controls is not None:
            strategy.controls.copy_(saved["c"])
            strategy.client_controls[saved["clients"]] = saved["c_i"]
            strategy.touched[saved["clients"]] = 1

    def publish(self, shared_model: nn.Module) -> None:
        if self.group.rank == 0:
            copy_model_state(self.model, shared_model)


class RoundTally:
    """What happened to my clients in one round."""

    def __init__(self):
        self.steps = self.samples = self.reported = self.dropped = self.partial = 0
        self.loss_sum = self.client_loss_sum = 0.0
        self.failed: list[int] = []
        self.nonfinite: list[int] = []

    def count(self, steps: int, samples: int, loss_sum: float, partial: bool) -> None:
        self.steps += steps
        self.samples += samples
        self.loss_sum += loss_sum
        self.client_loss_sum += loss_sum / max(1, samples)
        self.partial += int(partial)

    def as_extras(self) -> dict:
        return {"failed_clients": self.failed + self.nonfinite,
                "nonfinite_clients": self.nonfinite, "reported": self.reported,
                "dropped": self.dropped, "partial": self.partial,
                "client_loss_sum": self.client_loss_sum}
