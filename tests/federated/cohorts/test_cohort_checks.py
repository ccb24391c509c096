"""What cannot train as a cohort is found before the first round and named by module; how
many clients a cohort holds; per-client evaluation of many clients at once."""

import pytest
import torch
import torch.nn as nn

from mptrain.data.device_feed import DeviceFeed
from mptrain.data.sources import CLASSIFICATION
from mptrain.data.shared import SharedTensorDataset
from mptrain.engine.task import evaluate
from mptrain.federated.cohorts.trainer import CohortTrainer
from mptrain.federated.client_accuracy import client_accuracies
from mptrain.federated.cohorts.optimizer import ClientOptimizerSettings
from mptrain.federated.cohorts.clients import split_into_cohorts
from mptrain.federated.cohorts.check import check_cohort
from mptrain.federated.cohorts.memory import CPU_CAP_BYTES, cohort_size, memory_budget


class Branches(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        y = self.fc(x)
        return y if y.sum() > 0 else -y        # data-dependent Python control flow


class Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls += 1                        # an in-place write vmap cannot see batched
        return self.fc(x)


class RunningMean(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.register_buffer("mean", torch.zeros(4))

    def forward(self, x):
        self.mean.copy_(x.mean(0))             # a batched value written into a buffer
        return self.fc(x)


class Noise(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x) + torch.empty(3).uniform_()   # in-place RNG on an unbatched tensor


def check(model):
    trainer = CohortTrainer(model, CLASSIFICATION, ClientOptimizerSettings("sgd", 0.1),
                            torch.device("cpu"))
    generator = torch.Generator().manual_seed(0)
    return check_cohort(trainer, torch.randn(5, 4, generator=generator),
                        torch.randint(0, 3, (5,), generator=generator))


@pytest.mark.parametrize("model, named, why", [
    (nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3)), "module '1' (BatchNorm1d)",
     "batch statistics"),
    (nn.Sequential(nn.Linear(4, 4), nn.InstanceNorm1d(4, track_running_stats=True)),
     "module '1' (InstanceNorm1d)", "running statistics"),
    (nn.Sequential(nn.Linear(4, 4), Branches()), "module '1' (Branches)",
     "data-dependent control flow"),
    (Counter(), "the model (Counter)", "writes its buffer 'calls'"),
    (RunningMean(), "the model (RunningMean)", "inplace"),
    (Noise(), "the model (Noise)", "randomness"),
])
def test_what_cannot_vectorize_is_named(model, named, why):
    before = {name: b.clone() for name, b in model.named_buffers()}
    result = check(model)
    assert not result.vectorizes
    assert result.reason.startswith(named) and why in result.reason, result.reason
    assert "--vectorize-clients off" in result.reason and "\n" not in result.reason
    for name, b in model.named_buffers():          # the dry run left the model as it was
        assert torch.equal(b, before[name])


def test_models_that_vectorize_pass_with_a_memory_estimate():
    plain = check(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Dropout(0.5),
                                nn.Linear(8, 3)))
    assert plain.vectorizes and plain.reason is None
    norm = check(nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 3)))
    assert norm.vectorizes
    eval_bn = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3, track_running_stats=False))
    assert not check(eval_bn).vectorizes   # batch statistics still mix in the padding
    params = (4 * 8 + 8 + 8 * 3 + 3) * 4
    assert plain.client_bytes > 3 * params   # parameters, gradients, a temporary + more


def test_cohort_size_from_a_budget_or_forced():
    assert cohort_size(1000, 10_500) == 10
    assert cohort_size(10**9, 10) == 1              # at least one client
    assert cohort_size(1000, 10_500, forced=3) == 3
    budget = memory_budget(torch.device("cpu"), sharers=2)
    assert 0 < budget <= CPU_CAP_BYTES
    assert memory_budget(torch.device("cpu"), sharers=1) >= budget


def test_cohorts_are_as_even_as_their_cap_allows():
    assert [len(c) for c in split_into_cohorts(list(range(50)), 12)] == [10] * 5
    assert split_into_cohorts([4, 5, 6, 7, 8, 9, 10], 3) == [[4, 5, 6], [7, 8], [9, 10]]
    assert split_into_cohorts(list(range(20)), 10) == [list(range(10)), list(range(10, 20))]
    assert split_into_cohorts([], 4) == [] and split_into_cohorts([9], 4) == [[9]]


def test_clients_evaluated_together_score_as_one_by_one():
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(97, 6, generator=generator)
    targets = torch.randint(0, 3, (97,), generator=generator)
    feed = DeviceFeed(SharedTensorDataset(inputs, targets))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 3))
    index = torch.randperm(97, generator=generator)
    offsets = torch.tensor([0, 10, 10, 41, 42, 97])   # one client empty, one of one sample
    clients = range(1, 5)
    together = client_accuracies(model, feed, index, offsets, clients, batch_size=16,
                                 device=torch.device("cpu"))
    for position, client in enumerate(clients):
        own = index[offsets[client]:offsets[client + 1]]
        _, correct, count = evaluate(model, feed, own, CLASSIFICATION, 16,
                                     torch.device("cpu"))
        if count == 0:
            assert torch.isnan(together[position])
        else:
            assert together[position].item() == correct / count


class FakeGroup:
    """Two ranks' broadcast in one process: rank 0's tensor is kept for rank 1."""

    sent = None

    def __init__(self, rank, world_size=2):
        self.rank, self.world_size = rank, world_size

    def broadcast_(self, tensors, src=0):
        if self.rank == src:
            FakeGroup.sent = [t.clone() for t in tensors]
        else:
            for tensor, value in zip(tensors, FakeGroup.sent):
                tensor.copy_(value)


def gpu_cohorts(monkeypatch, rank, path, forced=None, saved=None):
    """A worker's CohortClients as on a GPU, its free memory faked: 10,000 bytes."""
    from types import SimpleNamespace

    from mptrain.strategies.fedavg import cohorts

    monkeypatch.setattr(cohorts, "memory_budget", lambda device, sharers: 10_000 // sharers)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    config = SimpleNamespace(seed=0, batch_size=4, optimizer="sgd", lr=0.1, momentum=0.0,
                             weight_decay=0.0, precision="32", fedavg=SimpleNamespace(
                                 local_epochs=1, straggler_rate=0.0, dropout_rate=0.0,
                                 straggler_mode="per-client", drop_stragglers=False,
                                 vectorize_chunk=forced,
                                 prox_mu=0.0, scaffold=False))
    setup = SimpleNamespace(device=torch.device("cpu"), data=SimpleNamespace(
        task=CLASSIFICATION), local_workers=None)
    trainer = SimpleNamespace(model=nn.Linear(3, 2))
    clients = cohorts.CohortClients(config, SimpleNamespace(rows=40), setup, trainer, None,
                                    path, client_bytes=100)
    if saved is not None:
        clients.load_state({"cohort_chunk": saved})
    return clients


def test_a_gpu_worker_sizes_cohorts_from_free_memory_and_every_rank_takes_rank_0s(
        monkeypatch):
    from mptrain.federated.cohorts.choice import ClientPath

    zero = gpu_cohorts(monkeypatch, 0, ClientPath(True))
    assert zero.agree(FakeGroup(0)).cohort_size == 40          # 5,000 bytes / 100: capped at rows
    one = gpu_cohorts(monkeypatch, 1, ClientPath(True))
    assert one.agree(FakeGroup(1)).describe() == "vectorized x40"
    assert zero.state() == {"cohort_size": 40}
    small = gpu_cohorts(monkeypatch, 0, ClientPath(True))
    monkeypatch.setattr("mptrain.strategies.fedavg.cohorts.memory_budget",
                        lambda device, sharers: 1_000)
    assert small.agree(FakeGroup(0, world_size=1)).cohort_size == 10
    resumed = gpu_cohorts(monkeypatch, 0, ClientPath(True), saved=7)
    assert resumed.agree(FakeGroup(0)).cohort_size == 7       # the run it continues
    forced = gpu_cohorts(monkeypatch, 0, ClientPath(True, 3), forced=3, saved=7)
    assert forced.agree(FakeGroup(0)).cohort_size == 3        # the user's size wins
    off = gpu_cohorts(monkeypatch, 0, ClientPath(False, reason="--vectorize-clients off"))
    assert not off.agree(FakeGroup(0)).vectorized and off.state() == {}


def test_auto_rule():
    from mptrain.federated.cohorts.choice import auto_path

    mlp = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    cnn = nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(8, 2))
    assert auto_path(mlp, "cpu", 50, 1).vectorized
    assert auto_path(mlp, "cpu", 20, 2).vectorized
    assert "5 client(s) per worker" in auto_path(mlp, "cpu", 10, 2).reason
    assert "convolutions (0)" in auto_path(cnn, "cpu", 50, 1).reason
    assert auto_path(cnn, "cuda", 4, 2).vectorized
    assert not auto_path(cnn, "cuda", 3, 2).vectorized


def test_a_long_refusal_from_torch_is_cut_at_a_sentence_not_mid_word():
    from mptrain.errors import brief

    assert brief("short message\nsecond line") == "short message"
    assert brief("One. " + "x" * 300) == "One."
    assert brief("First sentence. Second one ends past the limit " + "y" * 200,
                 limit=60) == "First sentence."
    cut = brief("word " * 100, limit=60)
    assert cut.endswith("word …") and len(cut) <= 62
    assert brief("") == ""
    reason = check(nn.Sequential(nn.Linear(4, 4), Branches())).reason
    said = reason[reason.index("(RuntimeError: ") + 1:reason.rindex("); use")]
    assert said.endswith(".") or said.endswith("…"), said


@pytest.mark.parametrize("local_workers, sharers", [(None, 4), (4, 4), (2, 2), (1, 1)])
def test_a_gpus_memory_is_shared_by_the_ranks_of_its_machine_only(monkeypatch, local_workers,
                                                                  sharers):
    """Under torchrun on several nodes the world is every node's ranks; those sharing rank
    0's GPU are its machine's (the plan's ``local_workers``: ``LOCAL_WORLD_SIZE``) over the
    machine's GPUs; mptrain's own workers are all on one machine (None)."""
    from mptrain.federated.cohorts.choice import ClientPath

    seen = []
    clients = gpu_cohorts(monkeypatch, 0, ClientPath(True))
    clients.setup.local_workers = local_workers
    monkeypatch.setattr("mptrain.strategies.fedavg.cohorts.memory_budget",
                        lambda device, n: seen.append(n) or 1_000)
    clients.agree(FakeGroup(0, world_size=4))
    assert seen == [sharers]


def test_a_torchrun_rank_is_told_how_many_ranks_share_its_machine(monkeypatch):
    from types import SimpleNamespace

    from mptrain.launch.attempt import Job
    from mptrain.launch.plan import plan_under_launcher
    from mptrain.launch.world import ExternalWorld

    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    strategy = SimpleNamespace(comm_kind=lambda config, local: None)
    config = SimpleNamespace(device="cpu", threads_per_worker=None)
    plan = plan_under_launcher(config, strategy, ExternalWorld(rank=0, world_size=8,
                                                               local_rank=0))
    job = Job(config=config, bundle=None, model=None, strategy=strategy, plan=plan,
              presenter=None, on_report=None)
    assert job.setup(0, None, None, None, torch.device("cpu")).local_workers == 2


@pytest.mark.parametrize("options, path", [
    # 100 clients, 12 expected a round: a round samples at most 55 (``poisson_capacity``)
    (dict(sampling="poisson"), "vectorized, cohorts of up to 55 (Poisson: 12 clients "
                               "expected per round)"),
    (dict(sampling="poisson", vectorize_chunk=8),
     "vectorized, cohorts of up to 8 (Poisson: 12 clients expected per round)"),
    (dict(), "vectorized x12"),                  # a fixed cohort: issue 39's form
])
def test_a_poisson_runs_path_says_the_most_a_cohort_holds_and_the_round_it_expects(
        options, path):
    """A Poisson round's cohort is sized for the most a round can sample, while a round
    trains about the expected count: the banner says both, not one size it rarely is."""
    from types import SimpleNamespace

    from mptrain.config import TrainConfig
    from mptrain.strategies.fedavg.cohorts import banner_line, choose_path

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    inputs, targets = torch.randn(400, 4), torch.randint(0, 3, (400,))
    config = TrainConfig(strategy="fedavg", device="cpu", batch_size=4, clients=100,
                         clients_per_round=12, vectorize_clients="on", **options)
    data = SimpleNamespace(train=SharedTensorDataset(inputs, targets), task=CLASSIFICATION)
    _, chosen = choose_path(config, model, data, workers=1)
    assert chosen.describe() == path
    assert banner_line(chosen) == f"clients: {path}"
    # a worker that sizes its cohorts (a GPU's) says the same
    assert chosen.sized(chosen.cohort_size).describe() == path



def test_a_checkpoint_keeps_the_cohort_size_and_one_from_before_the_rename_loads(monkeypatch):
    """Checkpoints written before the glossary (issue 52) call the size ``cohort_chunk``."""
    from mptrain.federated.cohorts.choice import ClientPath

    for key in ("cohort_size", "cohort_chunk"):
        clients = gpu_cohorts(monkeypatch, 0, ClientPath(True))
        clients.load_state({key: 7})
        assert clients.agree(FakeGroup(0)).cohort_size == 7


def test_auto_follows_what_fl_vectorized_measures_at_one_and_two_workers():
    """Issue 50's figures: the 2NN, 10 clients a round, stacked 1.38-1.77x with one worker
    (a share of 10) and 0.92x with two (a share of 5, one thread each); pfl's shape (50 a
    round) 1.81x with two. auto stacks where stacking measured faster, and only there."""
    from mptrain.federated.cohorts.choice import MIN_COHORT_CPU, auto_path
    from mptrain.models import build_model

    two_nn = build_model("mnist-2nn", (1, 28, 28), 10)
    assert auto_path(two_nn, "cpu", 10, 1).vectorized
    slower = auto_path(two_nn, "cpu", 10, 2)
    assert not slower.vectorized
    assert slower.reason.startswith("5 client(s) per worker per round with 2 workers (auto")
    assert auto_path(two_nn, "cpu", 50, 2).vectorized
    assert 5 < MIN_COHORT_CPU <= 10


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_auto_trains_recurrent_models_one_client_at_a_time_and_says_why(device):
    from mptrain.federated.cohorts.choice import auto_path
    from mptrain.models import build_model

    lstm = build_model("leaf-shakespeare-lstm", (80,), 80)
    path = auto_path(lstm, device, 50, 1)
    assert not path.vectorized
    assert path.describe().startswith("one client at a time: recurrent layers (lstm)")


class SubclassedLSTM(nn.LSTM):
    """An LSTM that ``stackable`` leaves alone (not exactly ``nn.LSTM``): its fused CPU
    kernel runs under vmap's loop over the clients."""


class Recurrent(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = SubclassedLSTM(4, 6, batch_first=True)
        self.fc = nn.Linear(6, 3)

    def forward(self, x):
        return self.fc(self.rnn(x)[0][:, -1])


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(),
                    reason="the fused CPU LSTM kernel is oneDNN's")
def test_a_layer_vmap_loops_over_is_named_with_its_op_and_auto_falls_back():
    from types import SimpleNamespace

    from mptrain.config import TrainConfig
    from mptrain.data.shared import SharedTensorDataset
    from mptrain.strategies.fedavg.cohorts import banner_line, choose_path

    torch.manual_seed(0)
    model = Recurrent()
    trainer = CohortTrainer(model, CLASSIFICATION, ClientOptimizerSettings("sgd", 0.1),
                            torch.device("cpu"))
    result = check_cohort(trainer, torch.randn(5, 7, 4), torch.randint(0, 3, (5,)))
    assert result.vectorizes                              # right, only slow: on may run it
    assert result.slow.startswith("module 'rnn' (SubclassedLSTM) runs aten::"), result.slow
    assert "no batching rule" in result.slow and "\n" not in result.slow
    data = SimpleNamespace(train=SharedTensorDataset(torch.randn(8, 7, 4),
                                                     torch.randint(0, 3, (8,))),
                           task=CLASSIFICATION)
    config = TrainConfig(strategy="fedavg", vectorize_clients="auto", batch_size=4)
    _, path = choose_path(config, model, data, 1)
    assert banner_line(path).startswith("clients: one client at a time: module 'rnn' "
                                        "(SubclassedLSTM) runs aten::")
    on = config.replace(fedavg=config.fedavg.__class__(
        **{**config.fedavg.__dict__, "vectorize_clients": "on"}))
    assert choose_path(on, model, data, 1)[1].vectorized
