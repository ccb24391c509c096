"""A client's or a cohort's rows of devices drawn on demand are drawn once for its local
epochs, into one block its batches read as held data (issue 50, item 9: a stacked batch
that looked for its ten devices at every step cost 1.6-2.3x the step on held rows), and the
trained model is bitwise the one the same rows held in memory give."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
import torch

import mptrain
from mptrain.data.device_feed import feed_for
from mptrain.data.natural import synthetic
from mptrain.data.natural.on_demand import DeviceRows
from mptrain.data.shared import SharedTensorDataset
from mptrain.data.sources import CLASSIFICATION, DataBundle
from mptrain.models import build_model

pytestmark = pytest.mark.timeout(180)

DEVICES, PER_ROUND, ROUNDS = 30, 4, 2


def on_demand_bundle() -> DataBundle:
    loaded = synthetic.load_synthetic("synthetic:1,1", DEVICES, seed=2, on_demand=True)
    return DataBundle(task=CLASSIFICATION, **vars(loaded))


def held_copy(bundle: DataBundle) -> DataBundle:
    """The same devices, every training row drawn up front into tensors."""
    rows = [bundle.train.device_rows(device) for device in range(DEVICES)]
    train = SharedTensorDataset(torch.cat([x for x, _ in rows]), torch.cat([y for _, y in rows]))
    return replace(bundle, train=train, clients=replace(bundle.clients, test_data=None))


def test_gathered_rows_are_the_pieces_rows_one_after_another():
    rows = on_demand_bundle().train
    offsets = rows.offsets
    pieces = [torch.arange(int(offsets[3]), int(offsets[4])),
              torch.arange(int(offsets[7]), int(offsets[8])).flip(0)[:5],
              torch.tensor([], dtype=torch.int64),
              torch.tensor([int(offsets[1]), int(offsets[9]) + 2])]   # two devices
    feed, positions = feed_for(rows, torch.device("cpu")).for_rows(pieces)
    assert isinstance(feed.data, SharedTensorDataset)   # held: a batch searches no device
    assert [len(p) for p in positions] == [len(p) for p in pieces]
    for piece, at in zip(pieces, positions):
        expected, got = rows.batch(piece), feed.batch(at)
        assert torch.equal(expected[0], got[0]) and torch.equal(expected[1], got[1])


def test_held_data_is_fed_as_it_is():
    held = held_copy(on_demand_bundle()).train
    feed = feed_for(held, torch.device("cpu"))
    pieces = [torch.arange(3), torch.arange(5, 9)]
    same, positions = feed.for_rows(pieces)
    assert same is feed and all(p is q for p, q in zip(positions, pieces))


@pytest.mark.parametrize("vectorize", ["on", "off"])
def test_devices_on_demand_train_bitwise_the_model_of_their_rows_held(tmp_path, monkeypatch,
                                                                     vectorize):
    bundle = on_demand_bundle()
    held = held_copy(bundle)
    log = tmp_path / "batches"
    honest = DeviceRows.batch

    def counted(self, indices):   # forked workers inherit it: each appends a line a call
        with open(log, "a") as handle:
            handle.write(f"{os.getpid()}\n")
        return honest(self, indices)

    monkeypatch.setattr(DeviceRows, "batch", counted)
    settings = dict(strategy="fedavg", workers=1, threads_per_worker=1, rounds=ROUNDS,
                    local_epochs=2, clients_per_round=PER_ROUND, batch_size=10, seed=4,
                    vectorize_clients=vectorize, start_method="fork")
    models = []
    for data in (bundle, held):
        torch.manual_seed(0)
        model = build_model("mclr", bundle.input_shape, bundle.output_size)
        result = mptrain.fit(model, data, **settings)
        models.append(result.model.state_dict())
        if data is bundle:
            steps = sum(row.steps for row in result.epochs)
            in_workers = [line for line in log.read_text().split() if int(line) != os.getpid()]
    # A draw a client (its rows, once for its local epochs), not one a batch.
    assert steps > 4 * ROUNDS * PER_ROUND
    assert len(in_workers) <= ROUNDS * PER_ROUND
    assert models[0].keys() == models[1].keys()
    for name in models[0]:
        assert torch.equal(models[0][name], models[1][name]), name
