"""Training one client: :class:`ClientTrainer` holds a worker's one model and one optimizer,
reused by every client the worker trains, and knows how to start a client from the global
model, run its local epochs and hand back its result as a flat vector."""

from __future__ import annotations

import copy

import torch

from ...data.batch_transform import batch_transform_for
from ...data.device_feed import feed_for
from ...engine.channels_last import ChannelsLastTraining
from ...engine.compiling import compile_if_asked
from ...engine.optim import build_optimizer
from ...engine.autocast import in_precision
from ...engine.schedule import learning_rate
from ...engine.seeding import seed_global_generator
from ...engine.step import train_step
from ...federated import availability, scaffold
from ...federated.client import add_proximal_gradient_, full_steps
from ...federated.sampling import client_seed
from ..model_state import floating_state
from .sample import RoundSample
from .shared import FedAvgShared, param_numel


class ClientTrainer:
    """A worker's model replica and optimizer, and the local training of one client."""

    def __init__(self, config, shared: FedAvgShared, setup, client_controls):
        self.config, self.shared, self.setup = config, shared, setup
        #: SCAFFOLD's c_i table as this process maps it (``FedAvgShared.client_controls``).
        self.client_controls = client_controls
        self.model = copy.deepcopy(setup.model).to(setup.device)
        # Private to this worker: it may change layout (the global model stays as it is).
        self.layout = ChannelsLastTraining(self.model, setup.device)
        self.forward = in_precision(self.layout.forward, config.precision, setup.device)
        self.feed = feed_for(setup.data.train, setup.device, setup.group.world_size,
                             rank=setup.group.rank, beat=getattr(setup.progress, "beat", None))
        self.transform = batch_transform_for(config)   # None: batches as gathered
        self.tensors = floating_state(self.model)
        # The server averages floating state only and never changes integer buffers
        # (BatchNorm's num_batches_tracked): the global model's are those of the model it
        # started from, taken here, and every client starts from them rather than from the
        # count its worker's previous clients left.
        self.integer_buffers = [(buffer, buffer.clone()) for buffer in self.model.buffers()
                                if not buffer.is_floating_point()]
        self.params = list(self.model.parameters())
        c, f = config, config.fedavg
        self.optimizer = build_optimizer(self.params, c.optimizer, c.lr, c.momentum,
                                         c.weight_decay)
        self.sizes = shared.client_sizes()
        self.round_sample = RoundSample(config, shared.rows)   # who else is in my round
        self.availability = availability.AvailabilityConfig.of(config)
        # Views of the shared global model, one per tensor: the server updates it in place,
        # so they stay valid for the whole run.
        sizes = [t.numel() for t in self.tensors]
        self.global_views = [view.view_as(t) for view, t in
                             zip(shared.global_flat.split(sizes), self.tensors)]
        # The shared global model lives in host memory; a client on a GPU needs its own
        # copies of what it reads every step (FedProx's anchor, SCAFFOLD's correction).
        self.on_host = setup.device.type == "cpu"
        #: FedProx's anchor: where each parameter started, the global model's (a personal
        #: trainer puts a client's own personal layers there).
        self.prox_anchors = self.global_views[:len(self.params)]
        if f.prox_mu and not self.on_host:
            self.prox_anchors = [torch.empty_like(p) for p in self.params]
        self.prox_scratch = [torch.empty_like(p) for p in self.params] if f.prox_mu else None
        self.param_numel = param_numel(self.model)
        if f.scaffold:
            self.correction = torch.empty(self.param_numel)
            self.correction_on_device = self.correction if self.on_host \
                else torch.empty(self.param_numel, device=setup.device)
            self.correction_views = [v.view_as(p) for v, p in zip(
                self.correction_on_device.split([p.numel() for p in self.params]),
                self.params)]
        self.correct_gradients = self._correct_gradients if f.prox_mu or f.scaffold else None
        self.load_global()
        # Clients load the global model in place, so one compile serves them all.
        compile_if_asked(config, self.model, self.forward, self.feed, setup.data.train,
                         setup.data.task, setup.device, None)

    def full_steps(self, client: int) -> int:
        """The local steps ``client`` takes when it does not straggle."""
        return full_steps(self.sizes[client], self.config.batch_size,
                          self.config.fedavg.local_epochs)

    def turn(self, client: int, round_index: int) -> availability.ClientTurn:
        """``client``'s round ``round_index``: the local steps it takes -- all of them, or a
        straggler's part -- and whether it reports (seeded: the same in every process,
        trained or not)."""
        return self.availability.client_turn(round_index, client, self.full_steps(client),
                                             self.round_sample.for_stragglers(round_index))

    def unheard(self, client: int, round_index: int) -> bool:
        """Whether the server drops ``client``'s update unread -- a straggler under
        ``--drop-stragglers`` -- so that it need not be trained: its row weighs 0 either
        way and nothing it computes reaches the model or any state (a personal trainer,
        whose client keeps what it trained, says no)."""
        return self.turn(client, round_index).straggler_dropped

    def client_lr(self, round_index: int) -> float:
        c = self.config
        return learning_rate(c.lr_schedule, c.lr, c.lr_decay, round_index, 0, 1)

    def train(self, client: int, round_index: int,
              relabel=None) -> tuple[int, int, float]:
        """Train ``client`` from the model as it stands (``load_global`` first); returns its
        steps, samples and the sum of its training loss over samples. ``relabel``: a
        transform of the client's labels (a label-flipping attacker's)."""
        c, f, setup, shared = self.config, self.config.fedavg, self.setup, self.shared
        # Data drawn on demand: the client's rows drawn once for all its local epochs.
        feed, (indices,) = self.feed.for_rows([shared.client_indices(client)])
        generator = torch.Generator().manual_seed(client_seed(c.seed, round_index, client))
        seed_global_generator(client_seed(c.seed, round_index, client), setup.device)
        budget = self.turn(client, round_index).budget
        self.optimizer.state.clear()  # a fresh optimizer for every client
        for group in self.optimizer.param_groups:
            group["lr"] = self.client_lr(round_index)
        if f.scaffold:
            scaffold.drift_correction(shared.controls, self.client_controls[client],
                                      out=self.correction)
            if not self.on_host:
                self.correction_on_device.copy_(self.correction)
        self.model.train()
        steps, samples = 0, 0
        loss_sum = torch.zeros((), dtype=torch.float64, device=setup.device)
        for _ in range(f.local_epochs):
            order = indices[torch.randperm(len(indices), generator=generator)]
            for _, batch, inputs, targets in feed.batches(
                    enumerate(torch.split(order, c.batch_size))):
                if steps == budget:
                    break   # a straggler stops here
                if self.transform is not None:   # fresh draws per (round, client, step)
                    inputs, targets = self.transform.apply(
                        inputs, targets, (c.seed, round_index, client, steps))
                if relabel is not None:
                    targets = relabel(targets)
                loss = train_step(self.forward, self.optimizer, inputs, targets,
                                  setup.data.task, self.correct_gradients)
                loss_sum += loss * len(batch)
                setup.progress.advance(len(batch))
                samples += len(batch)
                steps += 1
        return steps, samples, float(loss_sum)

    def _correct_gradients(self) -> None:
        """FedProx's proximal term and SCAFFOLD's drift correction, after backward."""
        f = self.config.fedavg
        if f.prox_mu:
            add_proximal_gradient_(self.params, self.prox_anchors, f.prox_mu,
                                   self.prox_scratch)
        if f.scaffold:
            scaffold.add_correction_(self.params, self.correction_views)

    def flat_result(self, out: torch.Tensor | None = None) -> torch.Tensor:
        """This client's model (parameters and floating buffers) as one flat vector, in host
        memory (where the server aggregates)."""
        pieces = [t.detach().reshape(-1) for t in self.tensors]
        if self.on_host:
            return torch.cat(pieces, out=out)
        flat = torch.cat(pieces)
        return flat.cpu() if out is None else out.copy_(flat)

    def load_global(self) -> None:
        """Make the worker's model the global model (parameters and all buffers)."""
        with torch.no_grad():
            for tensor, view in zip(self.tensors, self.global_views):
                tensor.copy_(view)
            for buffer, global_value in self.integer_buffers:
                buffer.copy_(global_value)
            if self.config.fedavg.prox_mu and not self.on_host:
                for anchor, param in zip(self.prox_anchors, self.params):
                    anchor.copy_(param)
