"""FedProx's devices generated on demand (issue 50, item 9): start-up draws O(devices)
numbers and the test sample, a device's rows are a pure function of (seed, device) in any
process, and a round draws only the devices it samples."""

from __future__ import annotations

import multiprocessing
import os
import pickle

import numpy as np
import pytest
import torch

import mptrain
from mptrain.data.natural.on_demand import TEST_DEVICES, RowRange, SyntheticDevices
from mptrain.data.natural import synthetic
from mptrain.data.sources import CLASSIFICATION, DataBundle
from mptrain.data.partitions import cut_training_set
from mptrain.errors import UserError
from mptrain.federated.sampling import sample_clients
from mptrain.models import build_model

pytestmark = pytest.mark.timeout(180)


def load_synthetic(name: str, devices: int, seed: int, on_demand: bool) -> DataBundle:
    loaded = synthetic.load_synthetic(name, devices, seed, on_demand=on_demand)
    return DataBundle(task=CLASSIFICATION, **vars(loaded))


def rows_in_a_fresh_process(devices_pickle: bytes, device: int):
    rows = pickle.loads(devices_pickle)
    x, y = rows.batch(torch.arange(int(rows.offsets[device]), int(rows.offsets[device + 1])))
    return x.numpy().tobytes(), y.numpy().tobytes()


def test_a_devices_rows_are_the_same_in_any_process():
    bundle = load_synthetic("synthetic:1,1", 40, seed=3, on_demand=True)
    device = 17
    here = bundle.train.device_rows(device)
    context = multiprocessing.get_context("spawn")   # nothing inherited: drawn afresh
    with context.Pool(1) as pool:
        there = pool.apply(rows_in_a_fresh_process, (pickle.dumps(bundle.train), device))
    assert (here[0].numpy().tobytes(), here[1].numpy().tobytes()) == there
    again = load_synthetic("synthetic:1,1", 40, seed=3, on_demand=True)
    assert torch.equal(again.train.device_rows(device)[0], here[0])
    other = load_synthetic("synthetic:1,1", 40, seed=4, on_demand=True)
    assert not torch.equal(other.train.device_rows(device)[0][:1], here[0][:1])


def test_train_and_test_rows_split_each_device_ninety_ten():
    bundle = load_synthetic("synthetic:0.5,0.5", 12, seed=0, on_demand=True)
    x, y = bundle.train.devices.rows(5)
    train, test = bundle.train.device_rows(5), bundle.clients.test_data.device_rows(5)
    assert torch.equal(torch.cat([train[0], test[0]]), torch.from_numpy(x))
    assert torch.equal(torch.cat([train[1], test[1]]), torch.from_numpy(y))
    assert len(train[0]) == int(0.9 * len(x))


def test_start_up_draws_only_the_test_sample_and_keeps_no_index_per_row():
    bundle = load_synthetic("synthetic:1,1", 20_000, seed=0, on_demand=True)
    devices = bundle.train.devices
    assert devices.drawn == TEST_DEVICES            # the pooled test set's devices, no more
    assert len(bundle.train) > 5_000_000              # ~9M rows never drawn
    index, offsets = cut_training_set("natural", bundle, 20_000, seed=0)
    assert isinstance(index, RowRange) and offsets.numel() == 20_001
    assert torch.equal(index[5:9], torch.arange(5, 9))
    assert devices.drawn == TEST_DEVICES


def test_large_synthetic_sets_are_generated_on_demand_by_size(monkeypatch):
    monkeypatch.setattr(synthetic, "ON_DEMAND_ROWS", 10_000)
    assert getattr(mptrain.load_data("synthetic:1,1", clients=200, seed=0).train,
                   "on_demand", False)
    assert not getattr(mptrain.load_data("synthetic:1,1", clients=5, seed=0).train,
                       "on_demand", False)


def test_pooled_partitions_and_scaffold_are_refused_in_one_line():
    bundle = load_synthetic("synthetic:1,1", 30, seed=0, on_demand=True)
    with pytest.raises(UserError, match="generated on demand"):
        cut_training_set("iid", bundle, 30, seed=0)
    model = build_model("mclr", bundle.input_shape, bundle.output_size)
    with pytest.raises(UserError, match="control variate for every client"):
        mptrain.fit(model, bundle, strategy="fedavg", workers=1, rounds=1, scaffold=True)


def test_a_round_draws_only_the_devices_it_samples(tmp_path, monkeypatch):
    clients, per_round, rounds, seed = 3_000, 4, 2, 5
    bundle = load_synthetic("synthetic:1,1", clients, seed=0, on_demand=True)
    log = tmp_path / "drawn"
    honest = SyntheticDevices.rows

    def counted(self, device):   # forked workers inherit it: each appends what it draws
        with open(log, "a") as handle:
            handle.write(f"{os.getpid()} {device}\n")
        return honest(self, device)

    monkeypatch.setattr(SyntheticDevices, "rows", counted)
    model = build_model("mclr", bundle.input_shape, bundle.output_size)
    result = mptrain.fit(model, bundle, strategy="fedavg", workers=2, threads_per_worker=1,
                         rounds=rounds, local_epochs=1, clients_per_round=per_round,
                         client_eval_every=1, seed=seed, vectorize_clients="off",
                         start_method="fork")
    sampled = {c for r in range(rounds) for c in sample_clients(clients, per_round, seed, r)}
    drawn = [int(line.split()[1]) for line in log.read_text().splitlines()]
    first = {0}    # the first rows: the dry runs' batch before the workers start
    assert sampled <= set(drawn) <= sampled | first   # every sampled one, and no other
    # Each sampled client: its training rows once in its round, its test rows once more.
    assert len([d for d in drawn if d not in first]) <= 2 * per_round * rounds
    assert result.summary["clients_evaluated"] == per_round
    assert result.summary["client_eval_only_sampled"] is True


def test_floyd_sample_is_uniform_distinct_and_seeded():
    big = 1 << 20
    one = sample_clients(big, 10, seed=1, round_index=0)
    assert one == sample_clients(big, 10, seed=1, round_index=0)
    assert len(set(one)) == 10 and one == sorted(one) and max(one) < big
    assert one != sample_clients(big, 10, seed=1, round_index=1)
    counts = np.zeros(8)
    from mptrain.federated.sampling import floyd_sample

    generator = torch.Generator().manual_seed(0)
    for _ in range(4000):
        for client in floyd_sample(8, 3, generator):
            counts[client] += 1
    assert np.allclose(counts / 4000, 3 / 8, atol=0.03)


def test_devices_drawn_on_demand_are_fingerprinted_without_drawing_them(tmp_path):
    """A checkpointed run on devices drawn on demand records what they are (the generator's
    parameters, seed and sizes: hashing their rows would draw every device), and a resume
    checks it: on the same devices it goes on, on others it is refused in one line."""
    from mptrain import checkpoint as checkpoints

    def devices(seed):
        return load_synthetic("synthetic:1,1", 30, seed=seed, on_demand=True)

    settings = dict(strategy="fedavg", workers=1, threads_per_worker=1, local_epochs=1,
                    clients_per_round=2, start_method="fork")
    bundle = devices(0)
    model = build_model("mclr", bundle.input_shape, bundle.output_size)
    mptrain.fit(model, bundle, rounds=1, out=tmp_path, checkpoint_every=1, **settings)
    recorded = checkpoints.load(tmp_path).data["train"]
    assert recorded["inputs"]["shape"] == [len(bundle.train), 60]
    # The test set's devices and the dry run's first one: the fingerprint drew none.
    assert bundle.train.devices.drawn == TEST_DEVICES_OF_30 + 1
    with pytest.raises(UserError, match="not the data the checkpoint was trained on: the "
                                        "training inputs"):
        mptrain.fit(build_model("mclr", (60,), 10), devices(1), resume=tmp_path, rounds=2)
    resumed = mptrain.fit(build_model("mclr", (60,), 10), devices(0), resume=tmp_path,
                          rounds=2)
    assert len(resumed.epochs) == 2


TEST_DEVICES_OF_30 = 30   # fewer devices than TEST_DEVICES: every one's test rows
