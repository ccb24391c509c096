"""ddp with one shared copy of the parameters, each rank stepping its chunk
(``strategies.sharded_step``): it must train as replicas that each step everything (to the
last bit of rounding), and resume bitwise."""

import copy

import pytest
import torch
import torch.nn as nn
from torch.utils.data import TensorDataset

import mptrain
from mptrain.config import TrainConfig
from mptrain.strategies import ddp
from mptrain.comm.shm import ShmGroupState
from mptrain.strategies.ddp import ShardedStepDDP
from mptrain.strategies.sharded_step import SharedParameters, worth_sharding


def make_data():
    generator = torch.Generator().manual_seed(5)
    inputs = torch.randn(240, 10, generator=generator)
    targets = (inputs @ torch.randn(10, 3, generator=generator)).argmax(dim=1)
    return TensorDataset(inputs, targets)


def make_model():
    torch.manual_seed(2)
    return nn.Sequential(nn.Linear(10, 33), nn.Tanh(), nn.Linear(33, 3))   # odd sizes


def fit(model, sharded, monkeypatch, **settings):
    if not sharded:   # decided in this process, before the workers start
        monkeypatch.setattr(ddp, "worth_sharding", lambda *args: False)
    data = make_data()
    settings = {"epochs": 2, "batch_size": 16, "lr": 0.05, "threads_per_worker": 1,
                **settings}
    result = mptrain.fit(model, data, data, strategy="ddp", **settings)
    monkeypatch.undo()
    return result


def assert_bitwise_equal(a: nn.Module, b: nn.Module):
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(x, y), name


def assert_equal_to_rounding(a: nn.Module, b: nn.Module):
    """The fused optimizers step 8 or 16 elements at a time and the rest one by one, and the
    two round differently (fused multiply-add or not): a chunk cut across parameters puts
    some elements in the other kind of lane, so the last bits may differ -- nothing more."""
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.allclose(x, y, rtol=1e-5, atol=1e-6), (name, (x - y).abs().max())


@pytest.mark.timeout(180)
@pytest.mark.parametrize("settings", [
    dict(workers=3, optimizer="sgd", momentum=0.9, weight_decay=1e-3),   # uneven chunks
    dict(workers=2, optimizer="adam"),
], ids=["sgd-momentum-3", "adam-2"])
def test_sharded_steps_train_like_replicas_that_each_step_everything(monkeypatch,
                                                                            settings):
    sharded = fit(make_model(), True, monkeypatch, **settings)
    replicas = fit(make_model(), False, monkeypatch, **settings)
    assert_equal_to_rounding(sharded.model, replicas.model)
    assert [e.train_loss for e in sharded.epochs] == \
        pytest.approx([e.train_loss for e in replicas.epochs], rel=1e-6)


def test_every_rank_trains_one_shared_copy_and_the_parents_model_stays_apart():
    model = make_model()
    settings = config(workers=2, optimizer="adam")
    shared = SharedParameters(model, settings)
    engine = ShardedStepDDP(shared, settings)
    state = ShmGroupState.create(2, shared.flat.numel(), torch.float32, 30.0,
                                 oversubscribed=True)
    replicas = [engine.replica(copy.deepcopy(model), state.attach(rank), torch.device("cpu"))
                for rank in range(2)]   # both in this process, as ranks taking turns are

    flat = shared.flat.untyped_storage().data_ptr()
    for replica in replicas:
        assert {p.untyped_storage().data_ptr() for p in replica.parameters()} == {flat}
    assert flat not in {p.untyped_storage().data_ptr() for p in model.parameters()}
    assert torch.equal(torch.cat([p.reshape(-1) for p in model.parameters()]), shared.flat)
    # Each rank steps its own chunk, and the two chunks cover the parameters once.
    steps = [engine.optimizer(replica) for replica in replicas]
    assert steps[0] is not steps[1]
    assert steps[0].chunk.numel() + steps[1].chunk.numel() == shared.flat.numel()


def config(**settings):
    return TrainConfig.from_settings({"strategy": "ddp", **settings})


def test_only_float32_cpu_models_without_convolutions_on_several_ranks_are_sharded():
    mlp = make_model()
    assert worth_sharding(mlp, config(), 2)
    assert not worth_sharding(mlp, config(), 1)                 # nothing to split
    assert not worth_sharding(copy.deepcopy(mlp).double(), config(), 2)
    assert not worth_sharding(mlp, config(device="cuda"), 2)
    frozen = make_model()
    frozen[0].weight.requires_grad_(False)
    assert not worth_sharding(frozen, config(), 2)              # weight decay would move it
    conv = nn.Sequential(nn.Conv2d(1, 4, 3), nn.Flatten(), nn.Linear(4, 2))
    assert not worth_sharding(conv, config(), 2)   # private replicas train in channels-last


def make_linear():
    torch.manual_seed(4)
    return nn.Linear(10, 3)   # 33 values: 4 ranks get 16, 16, 1 and none


@pytest.mark.timeout(180)
@pytest.mark.parametrize("make, settings, first, then, exact", [
    # The checkpoint holds the usual per-parameter optimizer state either way.
    (make_model, dict(workers=2, optimizer="sgd", momentum=0.9), False, True, False),
    (make_model, dict(workers=2, optimizer="adam"), True, True, True),
    # Every rank's part counts Adam's steps, also the rank whose chunk is empty: replicas
    # resumed from it (each loads its own rank's part) keep a straight run's bias correction.
    (make_linear, dict(workers=4, optimizer="adam"), True, False, False),
], ids=["replicas-then-sharded", "sharded-then-sharded", "empty-chunk-then-replicas"])
def test_a_checkpoint_resumes_on_either_engine(monkeypatch, tmp_path, make, settings, first,
                                               then, exact):
    out = tmp_path / "run"
    fit(make(), first, monkeypatch, out=out, checkpoint_every=1, **settings)
    if not then:
        monkeypatch.setattr(ddp, "worth_sharding", lambda *args: False)
    resumed = mptrain.fit(make(), make_data(), make_data(), resume=out, out=out, epochs=4)
    monkeypatch.undo()
    straight = fit(make(), then, monkeypatch, epochs=4, **settings)
    if exact:   # the same engine throughout: bit for bit
        assert_bitwise_equal(resumed.model, straight.model)
    else:
        assert_equal_to_rounding(resumed.model, straight.model)
