"""Real runs of ``fedavg`` on tiny data: the same model whatever the number of workers, equal
to a plain sequential FedAvg loop, client failures stopped or dropped, bitwise resume."""

import copy
import json

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import TensorDataset

import mptrain
from mptrain.comm.shm import ShmGroupState
from mptrain.data.partitions import partition_clients
from mptrain.errors import UserError, WorkerFailedError
from mptrain.launch.supervisor import Supervisor
from mptrain.engine.seeding import seed_global_generator
from mptrain.federated.sampling import client_seed, sample_clients

from fedavg_workload import (CLASSES, POISON, RUN, SAMPLES, make_data, make_model,
                             make_test_data)
from forking import fork_or_skip


class PoisonSensitive(nn.Module):
    """Raises on the poisoned sample: the client that holds it fails."""

    def __init__(self):
        super().__init__()
        self.net = make_model()

    def forward(self, x):
        if (x.abs() >= POISON).any():
            raise ValueError("poisoned sample")
        return self.net(x)


def state_of(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def fit(model, workers, data=None, **options):
    return mptrain.fit(model, data or make_data(), make_test_data(),
                       **{**RUN, "workers": workers, **options})


def plain_fedavg(model, dataset, rounds, clients, per_round, batch_size, lr, seed):
    """The textbook loop, one client after another, with mptrain's seeds for sampling and
    batch order: what fedavg must compute."""
    model = copy.deepcopy(model)
    inputs, targets = dataset.tensors
    parts = partition_clients("iid", targets, clients, seed)
    for round_index in range(rounds):
        results, weights = [], []
        for client in sample_clients(clients, per_round, seed, round_index):
            local = copy.deepcopy(model)
            optimizer = torch.optim.SGD(local.parameters(), lr=lr)
            generator = torch.Generator().manual_seed(client_seed(seed, round_index, client))
            order = parts[client][torch.randperm(len(parts[client]), generator=generator)]
            for batch in torch.split(order, batch_size):
                optimizer.zero_grad()
                F.cross_entropy(local(inputs[batch]), targets[batch]).backward()
                optimizer.step()
            results.append(state_of(local))
            weights.append(len(parts[client]))
        total = sum(weights)
        model.load_state_dict({k: sum(r[k] * (w / total) for r, w in zip(results, weights))
                               for k in results[0]})
    return model


@pytest.mark.timeout(120)
def test_fedavg_equals_a_plain_sequential_loop():
    initial = make_model()
    result = fit(copy.deepcopy(initial), workers=2)
    reference = plain_fedavg(initial, make_data(), RUN["rounds"], RUN["clients"],
                             RUN["clients_per_round"], RUN["batch_size"], RUN["lr"], RUN["seed"])
    for name, want in reference.state_dict().items():
        got = result.model.state_dict()[name]
        assert torch.allclose(got, want, rtol=0, atol=1e-6), name
    assert not torch.allclose(result.model[0].weight, initial[0].weight)  # it trained


@pytest.mark.timeout(120)
@pytest.mark.parametrize("partition", ["iid", "dirichlet:0.5"])
def test_same_seed_gives_the_bitwise_same_model_whatever_the_workers(partition):
    initial = make_model()
    one = fit(copy.deepcopy(initial), workers=1, partition=partition)
    three = fit(copy.deepcopy(initial), workers=3, partition=partition)
    for name, tensor in state_of(one.model).items():
        assert torch.equal(tensor, state_of(three.model)[name]), name
    rows = [m.as_dict() for m in three.rounds]
    assert [r["round"] for r in rows] == [1, 2, 3]
    assert all(r["clients"] == RUN["clients_per_round"] for r in rows)
    assert all(r["mean_client_loss"] > 0 and r["failed_clients"] == [] for r in rows)


def make_cumulative_norm_model():
    # momentum=None: the running statistics are averages over num_batches_tracked batches,
    # so a count carried from one client to the next changes the floating buffers too.
    torch.manual_seed(7)
    return nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16, momentum=None), nn.Tanh(),
                         nn.Linear(16, CLASSES))


@pytest.mark.timeout(120)
def test_every_client_starts_from_the_global_models_integer_buffers():
    initial = make_cumulative_norm_model()
    one = fit(copy.deepcopy(initial), workers=1)
    two = fit(copy.deepcopy(initial), workers=2)
    for name, tensor in state_of(one.model).items():
        assert torch.equal(tensor, state_of(two.model)[name]), name
    # The server does not average counts: the global model keeps its own.
    assert int(one.model[1].num_batches_tracked) == 0
    assert not torch.equal(one.model[1].running_mean, initial[1].running_mean)  # it trained


@pytest.mark.timeout(120)
def test_metrics_and_outputs_are_per_round(tmp_path):
    result = fit(make_model(), workers=2, rounds=4, eval_every=2, out=tmp_path / "run")
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert [r["round"] for r in rows] == [1, 2, 3, 4]
    assert [r["test_accuracy"] is not None for r in rows] == [False, True, False, True]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert (summary["unit"], summary["rounds"], summary["clients_per_round"]) == \
        ("round", 4, RUN["clients_per_round"])
    assert summary["test_accuracy"] == rows[-1]["test_accuracy"] == result.test_accuracy
    assert (tmp_path / "run" / "curves.png").stat().st_size > 0


@pytest.mark.timeout(120)
def test_target_accuracy_stops_at_the_first_round_that_reaches_it():
    full = fit(make_model(), workers=2, rounds=8)
    accuracies = [m.test_accuracy for m in full.rounds]
    target = accuracies[2]  # reached by round 3 at the latest
    first = next(i for i, a in enumerate(accuracies) if a >= target) + 1
    stopped = fit(make_model(), workers=2, rounds=8, target_accuracy=target)
    assert len(stopped.rounds) == first < 8
    assert stopped.summary["target_reached_at_round"] == first


@pytest.mark.timeout(120)
def test_a_failing_client_stops_the_run_naming_client_round_and_rank():
    parts = partition_clients("iid", make_data().tensors[1], RUN["clients"], RUN["seed"])
    poisoned = int(parts[5][0])
    with pytest.raises(WorkerFailedError) as caught:
        fit(PoisonSensitive(), workers=2, data=make_data(poisoned), clients_per_round=12)
    message = str(caught.value)
    assert "client 5 failed in round 1 on worker rank" in message
    assert "poisoned sample" in message
    assert "(accept_failures drops" in message   # fit() is told its keyword


@pytest.mark.timeout(120)
def test_accept_failures_drops_the_client_and_says_so(capsys):
    parts = partition_clients("iid", make_data().tensors[1], RUN["clients"], RUN["seed"])
    poisoned = int(parts[5][0])
    result = fit(PoisonSensitive(), workers=2, data=make_data(poisoned), clients_per_round=12,
                 accept_failures=True, quiet=False)
    rows = [m.as_dict() for m in result.rounds]
    assert all(r["failed_clients"] == [5] for r in rows)
    assert all(r["clients"] == 12 for r in rows)
    assert "dropped failing client(s) 5" in capsys.readouterr().err
    # The other eleven clients trained: the model moved.
    assert not torch.equal(result.model.net[0].weight, make_model()[0].weight)


@pytest.mark.timeout(180)
def test_resume_per_round_is_bitwise_identical(tmp_path):
    initial = make_model()
    whole = fit(copy.deepcopy(initial), workers=2, rounds=4, server_momentum=0.5,
                server_lr=0.8)
    fit(copy.deepcopy(initial), workers=2, rounds=2, server_momentum=0.5, server_lr=0.8,
        out=tmp_path, checkpoint_every=1)
    resumed = fit(copy.deepcopy(initial), workers=2, rounds=4, resume=tmp_path,
                  out=tmp_path)
    assert len(resumed.rounds) == 4
    for name, tensor in state_of(whole.model).items():
        assert torch.equal(tensor, state_of(resumed.model)[name]), name


@pytest.mark.timeout(120)
def test_fedprox_and_server_momentum_change_the_result():
    initial = make_model()
    plain = state_of(fit(copy.deepcopy(initial), workers=2).model)
    prox = state_of(fit(copy.deepcopy(initial), workers=2, prox_mu=1.0).model)
    momentum = state_of(fit(copy.deepcopy(initial), workers=2, server_momentum=0.9).model)
    for other in (prox, momentum):
        assert any(not torch.equal(plain[k], other[k]) for k in plain)


@pytest.mark.parametrize("options, needle", [
    (dict(clients=1000), "training samples; lower clients so that"),
    (dict(partition="shards:50"), "shards"),
    (dict(partition="dirichlet:0"), "dirichlet"),
    (dict(clients_per_round=20), "clients_per_round 20 is more than clients 12"),
    (dict(epochs=2), "use rounds"),
])
def test_bad_federated_settings_are_one_line_user_errors(options, needle):
    with pytest.raises(UserError) as caught:
        fit(make_model(), workers=2, **options)
    assert needle in str(caught.value) and "\n" not in str(caught.value)


def _weighted_average_rank(rank, channel, group_state):
    group = group_state.attach(rank)
    tensors = [torch.full((3,), float(rank + 1))]
    total = group.weighted_average_(tensors, weight=float(rank + 1))  # weights 1 and 2
    channel.send((total, tensors[0].tolist()))


@pytest.mark.timeout(60)
def test_weighted_average_collective_across_processes():
    state = ShmGroupState.create(2, 4, torch.float32, 30.0, oversubscribed=True)
    seen = {}
    result = Supervisor(fork_or_skip(), on_message=seen.__setitem__).run(
        _weighted_average_rank, [(state,)] * 2)
    assert result.ok, [f.describe() for f in result.failures]
    for rank in range(2):
        total, values = seen[rank]
        assert total == pytest.approx(3.0)
        assert values == pytest.approx([(1 * 1 + 2 * 2) / 3] * 3)


def test_a_clients_seed_sets_the_cpu_stream_as_torch_manual_seed_does():
    torch.manual_seed(123)
    expected = torch.rand(5)
    torch.manual_seed(0)
    seed_global_generator(123, torch.device("cpu"))
    assert torch.equal(torch.rand(5), expected)


def make_conv_data():
    generator = torch.Generator().manual_seed(99)
    inputs = torch.randn(SAMPLES, 1, 6, 6, generator=generator)
    targets = (inputs.flatten(1) @ torch.randn(36, CLASSES, generator=generator)).argmax(1)
    return TensorDataset(inputs, targets)


def make_conv_model():
    torch.manual_seed(5)
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(64, CLASSES))


@pytest.mark.timeout(120)
def test_a_conv_net_trains_its_clients_in_channels_last_to_the_textbook_result():
    # Clients of a convolutional network train in channels-last on CPU: the same model
    # with 1 and 2 workers, bit for bit, and the textbook loop's (NCHW) to rounding.
    initial, data = make_conv_model(), make_conv_data()
    test = TensorDataset(data.tensors[0][:60], data.tensors[1][:60])
    one = mptrain.fit(copy.deepcopy(initial), data, test, **{**RUN, "workers": 1})
    two = mptrain.fit(copy.deepcopy(initial), data, test, **{**RUN, "workers": 2})
    reference = plain_fedavg(initial, data, RUN["rounds"], RUN["clients"],
                             RUN["clients_per_round"], RUN["batch_size"], RUN["lr"], RUN["seed"])
    for name, tensor in state_of(one.model).items():
        assert torch.equal(tensor, state_of(two.model)[name]), name
        assert torch.allclose(tensor, reference.state_dict()[name], rtol=0, atol=1e-5), name
    assert not torch.allclose(one.model[0].weight, initial[0].weight)   # it trained
