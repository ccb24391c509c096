"""a3c's and dqn's Adam: ``torch.optim.Adam``'s CPU step bit for bit (with a3c's shared
state, clipping, parameters without gradients, checkpoints either way), and what it spares
a run (the import of torch._dynamo)."""

import copy

import pytest
import torch

from mptrain.engine.step import step_on_loss
from mptrain.rl.nets import ActorCritic, QNetwork
from mptrain.rl.plain_adam import PlainAdam
from mptrain.strategies.hogwild import attach_shared_state, shared_optimizer_state

from dynamo_free import imports_dynamo


def loss_of(net, step: int) -> torch.Tensor:
    obs = torch.randn(32, 4, generator=torch.Generator().manual_seed(step))
    out = net(obs.to(next(net.parameters()).dtype))
    if isinstance(out, tuple):       # actor-critic: logits and values
        logits, values = out
        return (logits ** 2).sum() + 10 * (values - 3).pow(2).mean()
    return (out - step % 3).pow(2).mean()


def assert_same(one, other):
    for a, b in zip(one.parameters(), other.parameters()):
        assert torch.equal(a, b)


NETS = {"actor-critic": lambda: ActorCritic(4, 2, hidden=32),
        "q-network": lambda: QNetwork(4, 2, hidden=32),
        "q-network float64": lambda: QNetwork(4, 2, hidden=32).double()}


@pytest.mark.parametrize("name", sorted(NETS))
@pytest.mark.parametrize("lr, max_norm", [(1e-3, 0.5), (2.3e-3, 10.0), (5e-2, None)])
def test_plain_adam_steps_as_torch_adam_bit_for_bit(name, lr, max_norm):
    torch.manual_seed(0)
    reference = NETS[name]()
    mine = copy.deepcopy(reference)
    adam = torch.optim.Adam(reference.parameters(), lr=lr)
    plain = PlainAdam(mine.parameters(), lr=lr)
    for step in range(40):
        for net, optimizer in ((reference, adam), (mine, plain)):
            step_on_loss(optimizer, loss_of(net, step), max_grad_norm=max_norm)
        assert_same(reference, mine)
    assert not torch.equal(next(mine.parameters()), next(NETS[name]().parameters()))
    for p, q in zip(reference.parameters(), mine.parameters()):
        for key in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(adam.state[p][key], plain.state[q][key]), key
            assert adam.state[p][key].dtype == plain.state[q][key].dtype, key


def test_a_parameter_without_a_gradient_is_left_alone_as_torch_leaves_it():
    """Steps where the value head gets no gradient (the loss reads the logits only): its
    moments and its step count stay where they were, as torch's."""
    torch.manual_seed(1)
    reference = ActorCritic(4, 2, hidden=16)
    mine = copy.deepcopy(reference)
    adam = torch.optim.Adam(reference.parameters(), lr=1e-2)
    plain = PlainAdam(mine.parameters(), lr=1e-2)
    for step in range(12):
        for net, optimizer in ((reference, adam), (mine, plain)):
            logits, values = net(torch.randn(8, 4, generator=torch.Generator()
                                             .manual_seed(step)))
            loss = logits.pow(2).sum() + (values.sum() if step % 3 == 0 else 0.0)
            step_on_loss(optimizer, loss, max_grad_norm=1.0)
        assert_same(reference, mine)
    steps = {int(adam.state[p]["step"]) for p in reference.parameters()}
    assert steps == {12, 4}
    assert [int(plain.state[p]["step"]) for p in mine.parameters()] == \
        [int(adam.state[p]["step"]) for p in reference.parameters()]


def test_actor_learners_sharing_adam_state_step_as_torch_adams_sharing_it():
    """a3c: every actor-learner's optimizer steps the one state in shared memory (moments
    and step count), in turn here; the same turns with torch's Adams give the same bits."""
    torch.manual_seed(2)
    runs = {}
    for kind in ("torch", "plain"):
        model = ActorCritic(4, 2, hidden=16)
        torch.manual_seed(2)
        model.load_state_dict(ActorCritic(4, 2, hidden=16).state_dict())
        states = shared_optimizer_state(list(model.parameters()), "adam", 0.0)
        actors = []
        for _ in range(3):
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-3) if kind == "torch" \
                else PlainAdam(model.parameters(), lr=1e-3)
            attach_shared_state(optimizer, model.parameters(), states)
            actors.append(optimizer)
        for step in range(15):
            step_on_loss(actors[step % 3], loss_of(model, step), max_grad_norm=0.5)
        runs[kind] = (model, states)
    assert_same(runs["torch"][0], runs["plain"][0])
    for theirs, mine in zip(runs["torch"][1], runs["plain"][1]):
        assert int(mine["step"]) == 15
        for key in theirs:
            assert torch.equal(theirs[key], mine[key]), key


@pytest.mark.parametrize("first, then", [("torch", "plain"), ("plain", "torch"),
                                         ("plain", "plain")])
def test_a_checkpoint_of_either_resumes_in_either_bit_for_bit(first, then):
    """dqn's checkpoint holds the optimizer's state_dict: one written by torch's Adam
    (before this class) resumes in this one, and the other way round, stepping on as one
    optimizer would have."""
    make = {"torch": torch.optim.Adam, "plain": PlainAdam}
    torch.manual_seed(3)
    net = QNetwork(4, 2, hidden=16)
    straight, before = copy.deepcopy(net), copy.deepcopy(net)
    through = torch.optim.Adam(straight.parameters(), lr=2.3e-3)
    optimizer = make[first](before.parameters(), lr=2.3e-3)
    for step in range(5):
        step_on_loss(through, loss_of(straight, step), max_grad_norm=10.0)
        step_on_loss(optimizer, loss_of(before, step), max_grad_norm=10.0)
    saved = copy.deepcopy(optimizer.state_dict())
    after = copy.deepcopy(before)
    resumed = make[then](after.parameters(), lr=1.0)   # the checkpoint's lr replaces it
    resumed.load_state_dict(saved)
    for step in range(5, 10):
        step_on_loss(through, loss_of(straight, step), max_grad_norm=10.0)
        step_on_loss(resumed, loss_of(after, step), max_grad_norm=10.0)
    assert_same(straight, after)


def test_a_fresh_state_dict_loads_as_never_stepped():
    net = QNetwork(4, 2, hidden=8)
    plain = PlainAdam(net.parameters(), lr=1e-3)
    plain.load_state_dict(torch.optim.Adam(net.parameters(), lr=1e-3).state_dict())
    assert plain.state == {}
    with pytest.raises(ValueError, match="different number of parameters"):
        PlainAdam(list(net.parameters())[:2]).load_state_dict(plain.state_dict())


@pytest.mark.timeout(120)
def test_an_a3c_or_dqn_run_and_its_parent_never_import_torch_dynamo():
    """Building a torch.optim optimizer imports torch._dynamo (0.7-1.6 s here), which the
    parent paid before forking an a3c or dqn run's workers; none needs it now. A run of
    one process (dqn: acting and learning) trains a round and checkpoints here. Both
    algorithms in one fresh interpreter (a spawn each cost a torch import), each checked
    as it ends: an import is for good, so the first that makes it is named."""
    code = """
import sys
from types import SimpleNamespace
import torch
from mptrain.launch import warmup
from mptrain.rl.config import RLConfig
from mptrain.strategies.registry import strategy_class
for algo in ("a3c", "dqn"):
    config = RLConfig(algo=algo, workers=1, steps=600, round_steps=300, learning_starts=100,
                      batch_size=32, buffer_size=1000)
    strategy = strategy_class(algo)(config)
    warmup.finish(build_optimizer=strategy.builds_torch_optimizer)
    model = strategy.network(4, 2)
    strategy.prepare(model, SimpleNamespace(shape=SimpleNamespace(obs_dim=4)))
    group = SimpleNamespace(rank=0, world_size=1, barrier=lambda: None)
    program = strategy.program(SimpleNamespace(config=config, group=group, model=model,
                                               progress=SimpleNamespace(advance=lambda n: None,
                                                                        beat=lambda: None)))
    program.train_round(0)
    program.train_round(1)
    program.state()
    program.close()
    assert "torch._dynamo" not in sys.modules, f"{algo} imported torch._dynamo"
"""
    assert not imports_dynamo(code, timeout_s=110)
