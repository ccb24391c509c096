"""The pieces of --personalize without processes: the spec, which tensors stay on each
client (and the refusals naming the layers there are), the per-client store in memory and
in a mapped file, the local loop's seeding, and the server's held columns."""

from __future__ import annotations

import pickle

import pytest
import torch
import torch.nn as nn

from mptrain.errors import UserError
from mptrain.federated.personal.layers import personal_layers, personal_numel
from mptrain.federated.personal.local import personal_seed
from mptrain.federated.personal.spec import PersonalizeSpec, parse_personalize
from mptrain.federated.personal.store import PersonalStore, place_rows


def bn_model():
    return nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.Tanh(), nn.Linear(16, 3))


@pytest.mark.parametrize("value, expected", [
    ("finetune:5", PersonalizeSpec("finetune", steps=5)),
    ("fedper:3", PersonalizeSpec("fedper", layers=("3",))),
    ("fedper:0, 3", PersonalizeSpec("fedper", layers=("0", "3"))),
    ("fedrep:last:1", PersonalizeSpec("fedrep", last=1)),
    ("fedbn", PersonalizeSpec("fedbn")),
    ("ditto:0.1", PersonalizeSpec("ditto", strength=0.1)),
])
def test_specs_parse(value, expected):
    assert parse_personalize(value) == expected


@pytest.mark.parametrize("value, message", [
    ("fedavg", "unknown method 'fedavg'; choose one of finetune, fedper"),
    ("finetune", "finetune needs finetune:STEPS"),
    ("finetune:0", "positive whole number of steps"),
    ("ditto:-1", "ditto:LAMBDA needs a finite number >= 0"),
    ("ditto:nan", "ditto:LAMBDA needs a finite number"),
    ("fedper:last:x", "last:N needs a positive whole number"),
    ("fedper:a,,b", "comma-separated module names"),
    ("fedbn:1", "fedbn takes no argument"),
    (3, "must be a string"),
])
def test_bad_specs_are_refused_in_one_line(value, message):
    with pytest.raises(UserError, match=message) as refused:
        parse_personalize(value)
    assert "\n" not in str(refused.value)


def test_layers_by_name_last_n_and_normalisation():
    model = bn_model()
    # floating state: 0.weight 0.bias 1.weight 1.bias 3.weight 3.bias, then 1's statistics
    assert personal_layers(model, parse_personalize("fedper:3")).tensors == (4, 5)
    assert personal_layers(model, parse_personalize("fedrep:last:2")).tensors == (2, 3, 4, 5, 6, 7)
    fedbn = personal_layers(model, parse_personalize("fedbn"))
    assert fedbn.modules == ("1",) and fedbn.tensors == (2, 3, 6, 7)
    assert personal_numel(model, fedbn) == 4 * 16
    assert personal_layers(model, parse_personalize("ditto:1")).whole
    assert personal_layers(model, parse_personalize("finetune:1")) is None


@pytest.mark.parametrize("value, message", [
    ("fedper:4", r"no layer '4'; its layers: 0, 1, 3"),
    ("fedper:0,1,3", "every layer of the model, which leaves nothing to average; its layers: "
                     "0, 1, 3"),
    ("fedrep:last:3", "would keep every layer personal"),
    ("fedper:2", "hold\\(s\\) no parameters; the layers that do: 0, 1, 3"),
])
def test_layer_refusals_name_the_layers_there_are(value, message):
    with pytest.raises(UserError, match=message):
        personal_layers(bn_model(), parse_personalize(value))


def test_fedbn_without_a_normalisation_layer_is_refused():
    with pytest.raises(UserError, match="no normalisation layer .*its layers: 0, 2"):
        personal_layers(nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2)),
                        parse_personalize("fedbn"))


def test_the_store_spills_beyond_its_budget_to_a_mapped_file(tmp_path):
    placement = place_rows(clients=5, width=3, budget_bytes=2 * 3 * 4 + 5)
    assert (placement.memory_rows, placement.disk_rows) == (2, 3)
    assert placement.disk_bytes == 3 * 3 * 4
    store = PersonalStore(placement, tmp_path / "state.f32", shared=False)
    assert (tmp_path / "state.f32").stat().st_size == placement.disk_bytes
    assert not list(tmp_path.glob("*.partial"))   # made whole under another name
    for client in (1, 4):
        store.put(client, torch.full((3,), float(client)))
    assert store.has(4) and not store.has(3)
    # Another process's view (pickled as the spawn start method sends it) sees the writes.
    other = pickle.loads(pickle.dumps(store))
    assert torch.equal(other.row(4), torch.full((3,), 4.0))
    other.row(3).copy_(torch.ones(3))            # through the file: MAP_SHARED
    assert torch.equal(store.row(3), torch.ones(3))
    store.put(3, torch.ones(3))
    saved = store.state()
    assert saved["clients"].tolist() == [1, 3, 4]
    fresh = PersonalStore(placement, tmp_path / "again.f32", shared=False)
    fresh.load_state(saved)
    assert all(torch.equal(fresh.row(c), store.row(c)) for c in range(5))
    assert fresh.touched.tolist() == [0, 1, 0, 1, 1]


def test_rows_of_another_width_are_refused(tmp_path):
    saved = PersonalStore(place_rows(2, 3, 1 << 20), None, shared=False)
    saved.put(1, torch.ones(3))
    other = PersonalStore(place_rows(2, 4, 1 << 20), None, shared=False)
    with pytest.raises(ValueError, match="3 floats a client and this run's 4"):
        other.load_state(saved.state())


def test_the_training_methods_need_one_machines_shared_memory():
    from types import SimpleNamespace

    from mptrain.config import TrainConfig
    from mptrain.strategies.fedavg.personal_setup import check_personalize_run

    torchrun = SimpleNamespace(comm=SimpleNamespace(shares_memory=False))
    with pytest.raises(UserError, match="one machine's shared memory"):
        check_personalize_run(TrainConfig(strategy="fedavg", personalize="fedper:3"), None,
                              bn_model(), torchrun, None)
    check_personalize_run(TrainConfig(strategy="fedavg", personalize="finetune:2"), None,
                          bn_model(), torchrun, None)   # scoring only: runs there


def test_every_kind_of_loop_has_its_own_seed():
    seeds = {personal_seed(3, 2, 7, kind) for kind in ("finetune", "head", "ditto")}
    assert len(seeds) == 3 and all(0 <= s < 2**63 for s in seeds)


def test_held_columns_keep_their_values_in_every_slice_a_rank_steps():
    """A rank steps its slice of the columns: a held range may start before it, end in it,
    or lie across two ranks' slices; the caller's average is left as it was."""
    from mptrain.federated.personal.held import HeldColumns, hold_columns
    from mptrain.federated.server_opt import build_server_optimizer

    flat = torch.zeros(10)
    server = HeldColumns(build_server_optimizer("sgd"), [(2, 4), (6, 9)], flat)
    average = torch.arange(1.0, 11.0)
    for part in (slice(0, 5), slice(5, 10)):   # two ranks' slices
        target = average[part].clone()
        server.step_(flat[part], target, {})
        assert torch.equal(target, average[part])
    assert flat.tolist() == [1, 2, 0, 0, 5, 6, 0, 0, 0, 10]
    with pytest.raises(RuntimeError, match="not a slice of the global model"):
        server.step_(flat[0:5].clone(), average[0:5], {})
    plain = build_server_optimizer("sgd")
    assert hold_columns(plain, [], flat) is plain
    # Momentum a checkpoint written before the columns were held may carry there.
    momentum = build_server_optimizer("sgd", lr=1.0, momentum=0.9)
    state = {"velocity": torch.full((10,), 0.5)}
    held = HeldColumns(momentum, [(2, 4)], flat)
    before = flat.clone()
    held.step_(flat, average, state)
    assert torch.equal(flat[2:4], before[2:4]) and not torch.equal(flat[:2], before[:2])
