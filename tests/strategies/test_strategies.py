"""Real multi-process runs of the strategies on tiny synthetic data.

The invariants: ``sync`` with ``sync_every=1`` and ``ddp`` are large-batch SGD (checked
against a step-by-step reference computed here), runs are deterministic, replicas are equal
across ranks after every synchronisation, hogwild workers all write the one shared model,
and a worker failure ends the run with a WorkerFailedError and no process left behind.
"""

import copy
import multiprocessing
import os
import signal
import sys
from pathlib import Path

import numpy as np
import psutil
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared helpers
from run_watch import live_children  # noqa: E402

import mptrain  # noqa: E402
from mptrain.api import bundle_from_datasets
from mptrain.comm.dist import DistSpec
from mptrain.comm.shm import ShmGroupState
from mptrain.config import TrainConfig, TrainingDefaults
from mptrain.data.sharding import batches, shard_indices
from mptrain.engine.loop import WorkerSetup, train
from mptrain.errors import RunInterrupted, WorkerFailedError
from mptrain.launch.board import ProgressBoard
from mptrain.launch.supervisor import Supervisor
from mptrain.strategies.model_state import floating_state
from mptrain.strategies.ddp import DDPStrategy
from mptrain.strategies.hogwild import HogwildStrategy
from mptrain.strategies.sync import SyncStrategy
from forking import fork_or_skip

SAMPLES, FEATURES, CLASSES = 256, 6, 3
WORKERS, BATCH, LR, EPOCHS, SEED = 2, 16, 0.2, 2, 0
RUN = dict(workers=WORKERS, epochs=EPOCHS, batch_size=BATCH, lr=LR, momentum=0.0,
           optimizer="sgd", seed=SEED, threads_per_worker=1, quiet=True)


# -- data and models ---------------------------------------------------------------------------

def make_data(samples=SAMPLES):
    generator = torch.Generator().manual_seed(1234)
    inputs = torch.randn(samples, FEATURES, generator=generator)
    teacher = torch.randn(FEATURES, CLASSES, generator=generator)
    targets = (inputs @ teacher).argmax(dim=1)  # learnable by a linear model
    return TensorDataset(inputs, targets)


def make_model(seed=7):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(FEATURES, 16), nn.Tanh(), nn.Linear(16, CLASSES))


class NormedNet(nn.Module):
    """With BatchNorm: sync must average its running statistics too."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.hidden = nn.Linear(FEATURES, 16)
        self.norm = nn.BatchNorm1d(16)
        self.out = nn.Linear(16, CLASSES)

    def forward(self, x):
        return self.out(torch.tanh(self.norm(self.hidden(x))))


class ExplodingNet(nn.Module):
    """Works in the parent (fit's shape check) but raises in worker rank 1."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(FEATURES, CLASSES)

    def forward(self, x):
        if multiprocessing.current_process().name == "mptrain-worker-1":
            raise RuntimeError("model exploded")
        return self.linear(x)


class SuicidalNet(nn.Module):
    """Works in the parent but kills worker rank 0 with SIGKILL."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(FEATURES, CLASSES)

    def forward(self, x):
        if multiprocessing.current_process().name == "mptrain-worker-0":
            os.kill(os.getpid(), signal.SIGKILL)
        return self.linear(x)


class VectorModel(nn.Module):
    def __init__(self, size):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(size))


def state_of(model):
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


def large_batch_sgd(model, dataset, workers=WORKERS, epochs=EPOCHS, batch_size=BATCH, lr=LR,
                    seed=SEED):
    """The reference: every step takes each worker's batch for that step, averages the
    workers' mean-loss gradients and applies one plain SGD step."""
    model = copy.deepcopy(model)
    inputs, targets = dataset.tensors
    for epoch in range(epochs):
        shards = [shard_indices(len(inputs), workers, rank, seed, epoch)
                  for rank in range(workers)]
        for step_batches in zip(*(batches(shard, batch_size) for shard in shards)):
            grads = []
            for indices in step_batches:
                model.zero_grad(set_to_none=True)
                F.cross_entropy(model(inputs[indices]), targets[indices]).backward()
                grads.append([p.grad.clone() for p in model.parameters()])
            with torch.no_grad():
                for param, *per_worker in zip(model.parameters(), *grads):
                    param.add_(torch.stack(per_worker).mean(dim=0), alpha=-lr)
    return model


def assert_params_close(got, want, atol):
    for (name, a), b in zip(got.named_parameters(), want.parameters()):
        assert torch.allclose(a, b, rtol=0, atol=atol), (name, (a - b).abs().max().item())


def assert_states_equal(a, b):
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


def fit(model, strategy, **options):
    return mptrain.fit(model, make_data(), strategy=strategy, **{**RUN, **options})


# -- equivalence with large-batch SGD ----------------------------------------------------------

@pytest.mark.timeout(120)
def test_sync_every_step_equals_large_batch_sgd():
    initial = make_model()
    result = fit(copy.deepcopy(initial), "sync", sync_every=1)
    reference = large_batch_sgd(initial, make_data())
    assert_params_close(result.model, reference, atol=1e-6)
    # It trained: the parameters moved.
    assert not torch.allclose(result.model[0].weight, initial[0].weight)


@pytest.mark.timeout(120)
def test_ddp_shm_equals_large_batch_sgd_and_is_deterministic():
    initial = make_model()
    first = state_of(fit(copy.deepcopy(initial), "ddp").model)
    second = state_of(fit(copy.deepcopy(initial), "ddp").model)
    reference = large_batch_sgd(initial, make_data())

    assert_states_equal(first, second)
    for name, want in reference.state_dict().items():
        assert torch.allclose(first[name], want, rtol=0, atol=1e-5), name


@pytest.mark.timeout(120)
def test_sync_runs_are_deterministic():
    initial = make_model()
    first = state_of(fit(copy.deepcopy(initial), "sync", sync_every=3).model)
    second = state_of(fit(copy.deepcopy(initial), "sync", sync_every=3).model)
    assert_states_equal(first, second)


@pytest.mark.timeout(120)
def test_ddp_gloo_matches_ddp_shm():
    initial = make_model()
    shm = fit(copy.deepcopy(initial), "ddp", ddp_backend="shm").model
    gloo = fit(copy.deepcopy(initial), "ddp", ddp_backend="gloo").model
    # Same gradients, summed in a different order.
    assert_params_close(gloo, shm, atol=1e-5)


# -- replicas equal across ranks ---------------------------------------------------------------

class _RecordFinalState:
    """Keeps what this rank's replica holds when the epoch is published."""

    final_state = None

    def publish(self, replica, shared_model, group):
        super().publish(replica, shared_model, group)
        module = self.unwrap(replica)
        self.final_state = {
            "params": [p.detach().numpy().copy() for p in module.parameters()],
            "floating": [t.detach().numpy().copy() for t in floating_state(module)],
        }


class RecordingSync(_RecordFinalState, SyncStrategy):
    pass


class RecordingDDP(_RecordFinalState, DDPStrategy):
    pass


def train_and_send_state(rank, channel, config, bundle, model, strategy, comm, board):
    torch.set_num_threads(1)
    group = comm.attach(rank)
    train(WorkerSetup(rank=rank, config=config, data=bundle, model=model, strategy=strategy,
                      group=group, progress=board.writer(rank), report=lambda report: None,
                      device=torch.device("cpu")))
    channel.send(strategy.final_state)
    group.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("strategy_class, options, comm, compare", [
    (RecordingSync, dict(sync_every=None), "shm", "floating"),
    (RecordingSync, dict(sync_every=1), "shm", "floating"),
    (RecordingSync, dict(sync_every=3), "shm", "floating"),  # last sync at the epoch's end
    (RecordingDDP, dict(), "shm", "params"),
    (RecordingDDP, dict(ddp_backend="gloo"), "gloo", "params"),
], ids=["sync-epoch", "sync-1", "sync-3", "ddp-shm", "ddp-gloo"])
def test_replicas_are_bitwise_equal_across_ranks(strategy_class, options, comm, compare):
    config = TrainConfig.from_settings(dict(strategy=strategy_class.name,
                                            **{**RUN, "epochs": 1, **options}),
                                       TrainingDefaults())
    bundle = bundle_from_datasets(make_data(200), None).share_memory_()  # uneven last batch
    model = NormedNet()
    model.share_memory()
    strategy = strategy_class(config)
    if comm == "shm":
        group_state = ShmGroupState.create(WORKERS, strategy.comm_numel(model), torch.float32,
                                           30.0, oversubscribed=True)
    else:
        group_state = DistSpec("gloo", WORKERS, 30.0)
    states = {}
    try:
        result = Supervisor(fork_or_skip(), on_message=states.__setitem__).run(
            train_and_send_state,
            [(config, bundle, model, strategy, group_state, ProgressBoard.create(WORKERS))] * 2)
    finally:
        if comm != "shm":
            group_state.release()

    assert result.ok, [f.describe() for f in result.failures]
    first, second = (states[rank][compare] for rank in range(WORKERS))
    assert len(first) == len(second) > 0
    for a, b in zip(first, second):
        assert np.array_equal(a, b)
    # Rank 0 published its replica into the parent's shared model.
    for a, b in zip(states[0]["params"], model.parameters()):
        assert np.array_equal(a, b.detach().numpy())


# -- hogwild -----------------------------------------------------------------------------------

def hogwild_step_in_turn(rank, channel, model, strategy, group_state):
    """Each rank, in rank order, takes one SGD step whose gradient is -e_rank."""
    group = group_state.attach(rank)
    replica = strategy.replica(model, group, torch.device("cpu"))
    optimizer = strategy.optimizer(replica)
    for turn in range(group.world_size):
        if turn == rank:
            gradient = torch.zeros_like(replica.weight)
            gradient[rank] = -1.0
            replica.weight.grad = gradient
            optimizer.step()
        group.barrier()
    channel.send(replica.weight.detach().numpy().copy())


@pytest.mark.timeout(60)
@pytest.mark.parametrize("share_state, expected", [
    (False, [1.0, 1.0, 1.0]),
    # The momentum buffer is shared, so rank 1 also applies 0.5 * rank 0's gradient, and
    # rank 2 applies 0.25 * rank 0's and 0.5 * rank 1's.
    (True, [1.75, 1.5, 1.0]),
], ids=["own-optimizer-state", "shared-optimizer-state"])
def test_hogwild_workers_all_write_the_one_shared_model(share_state, expected):
    world = 3
    config = TrainConfig.from_settings(dict(strategy="hogwild", workers=world, lr=1.0,
                                            momentum=0.5 if share_state else 0.0,
                                            share_optimizer_state=share_state),
                                       TrainingDefaults())
    model = VectorModel(world)
    model.share_memory()
    strategy = HogwildStrategy(config)
    strategy.prepare(model)
    group_state = ShmGroupState.create(world, 1, torch.float32, 30.0, oversubscribed=True)
    seen = {}
    result = Supervisor(fork_or_skip(), on_message=seen.__setitem__).run(
        hogwild_step_in_turn, [(model, strategy, group_state)] * world)

    assert result.ok, [f.describe() for f in result.failures]
    for rank in range(world):
        assert seen[rank].tolist() == expected
    assert model.weight.detach().tolist() == expected


@pytest.mark.timeout(120)
def test_hogwild_trains_the_shared_model_and_the_loss_falls():
    initial = make_model()
    model = copy.deepcopy(initial)
    result = fit(model, "hogwild", epochs=4)

    assert result.model is model
    losses = [epoch.train_loss for epoch in result.epochs]
    assert len(losses) == 4
    assert all(later < earlier for earlier, later in zip(losses, losses[1:])), losses
    assert not torch.allclose(model[0].weight, initial[0].weight)


# -- failure -----------------------------------------------------------------------------------

@pytest.mark.timeout(60)
@pytest.mark.parametrize("strategy", ["sync", "ddp"])
def test_a_worker_raising_in_forward_fails_the_run_and_leaves_no_process(strategy):
    with pytest.raises(WorkerFailedError) as caught:
        fit(ExplodingNet(), strategy, **({"sync_every": 1} if strategy == "sync" else {}))

    message = str(caught.value)
    assert "model exploded" in message
    assert "worker rank 1" in message
    [failure] = caught.value.failures
    assert (failure.rank, failure.reason) == (1, "raised")
    assert not psutil.pid_exists(failure.pid) or \
        psutil.Process(failure.pid).ppid() != os.getpid()
    assert live_children() == []


@pytest.mark.timeout(60)
def test_a_worker_killed_by_a_signal_fails_the_run_and_leaves_no_process():
    with pytest.raises(WorkerFailedError) as caught:
        fit(SuicidalNet(), "sync", sync_every=1)

    [failure] = caught.value.failures
    assert (failure.rank, failure.reason, failure.signal_name) == (0, "signal", "SIGKILL")
    assert "killed by SIGKILL" in str(caught.value)
    assert live_children() == []



# -- channels-last training of private replicas ------------------------------------------------

class ConvNet(nn.Module):
    """A small conv net that records, in a buffer the strategies carry to the result, whether
    it trained with its convolution in channels-last."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(5)
        self.conv = nn.Conv2d(2, 4, kernel_size=3)
        self.out = nn.Linear(4 * 4 * 4, CLASSES)
        self.register_buffer("trained_channels_last", torch.zeros(()))

    def forward(self, x):
        if self.training:
            weight = self.conv.weight
            self.trained_channels_last.fill_(float(
                weight.is_contiguous(memory_format=torch.channels_last)
                and not weight.is_contiguous()))
        return self.out(torch.tanh(self.conv(x)).flatten(1))


def conv_data():
    generator = torch.Generator().manual_seed(99)
    inputs = torch.randn(SAMPLES, 2, 6, 6, generator=generator)
    targets = (inputs.flatten(1) @ torch.randn(72, CLASSES, generator=generator)).argmax(1)
    return TensorDataset(inputs, targets)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("strategy, options, channels_last", [
    ("sync", {"sync_every": 1}, True), ("ddp", {}, True),
    # hogwild's shared model is laid out channels-last once, before its workers start
    ("hogwild", {}, True), ("single", {"workers": 1}, True)])
def test_private_replicas_of_conv_nets_train_in_channels_last(strategy, options,
                                                              channels_last):
    initial = ConvNet()
    result = mptrain.fit(copy.deepcopy(initial), conv_data(), strategy=strategy,
                         **{**RUN, **options})
    assert result.model.trained_channels_last.item() == float(channels_last)
    # The caller's model keeps the usual layout, whatever its replicas trained in.
    assert all(p.is_contiguous() for p in result.model.parameters())
    if strategy in ("sync", "ddp"):
        # The same maths as the NCHW textbook loop, up to float summation order.
        reference = large_batch_sgd(initial, conv_data())
        assert_params_close(result.model, reference, atol=1e-5)


@pytest.mark.timeout(120)
def test_single_leaves_a_model_in_shared_memory_where_it_is():
    # Another process may hold this model's storage: a new layout would be a private copy.
    model = ConvNet().share_memory()
    pointers = [p.data_ptr() for p in model.parameters()]
    result = mptrain.fit(model, conv_data(), strategy="single", **{**RUN, "workers": 1})
    assert result.model is model and model.trained_channels_last.item() == 0.0
    assert [p.data_ptr() for p in model.parameters()] == pointers
    assert all(p.is_shared() for p in model.parameters())


class StopsMidRound(ConvNet):
    """Ctrl-C on its third training step."""

    steps = 0

    def forward(self, x):
        if self.training:
            StopsMidRound.steps += 1
            if StopsMidRound.steps == 3:
                raise KeyboardInterrupt
        return super().forward(x)


def test_single_hands_the_callers_model_back_in_its_layout_when_training_stops():
    model = StopsMidRound()
    with pytest.raises(RunInterrupted):
        mptrain.fit(model, conv_data(), strategy="single", **{**RUN, "workers": 1})
    assert model.trained_channels_last.item() == 1.0   # it did train in channels-last
    assert all(p.is_contiguous() for p in model.parameters())
