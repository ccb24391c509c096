"""PPO's flat Adam: torch's Adam and gradient clipping on one flat tensor, and what it
spares a run (the import of torch._dynamo)."""

import copy

import pytest
import torch

from mptrain.errors import UserError
from mptrain.rl import flat_adam
from mptrain.rl.flat_adam import FlatAdam, fused_adam_runs
from mptrain.rl.nets import SeparateActorCritic

from dynamo_free import imports_dynamo


def loss_of(net, step: int) -> torch.Tensor:
    obs = torch.randn(32, 4, generator=torch.Generator().manual_seed(step))
    logits, values = net(obs)
    return (logits ** 2).sum() + 10 * (values - 3).pow(2).mean()


CPU_HAS_FUSED_ADAM = fused_adam_runs(torch.device("cpu"), torch.float32)


def steps_as_torch_adam_bit_for_bit(max_norm, torch_settings: dict,
                                    fused: bool | None) -> FlatAdam:
    torch.manual_seed(0)
    reference = SeparateActorCritic(4, 2)
    mine = copy.deepcopy(reference)
    adam = torch.optim.Adam(reference.parameters(), lr=3e-3, eps=1e-5, **torch_settings)
    flat = FlatAdam(mine, lr=3e-3, eps=1e-5, fused=fused)
    for step in range(20):
        adam.zero_grad()
        loss_of(reference, step).backward()
        if max_norm is not None:
            torch.nn.utils.clip_grad_norm_(reference.parameters(), max_norm)
        adam.step()
        flat.zero_grad()
        loss_of(mine, step).backward()
        if max_norm is not None:
            flat.clip_grad_norm_(max_norm)
        flat.step()
    assert all(torch.equal(a, b) for a, b in zip(reference.parameters(), mine.parameters()))
    assert not torch.equal(next(mine.parameters()), next(SeparateActorCritic(4, 2)
                                                         .parameters()))
    # the parameters are views of the flat tensor, the gradients of the flat gradient
    assert all(p.untyped_storage().data_ptr() == flat.flat.untyped_storage().data_ptr()
               for p in mine.parameters())
    assert flat.grad.abs().sum() > 0 and flat.steps == 20
    return flat


@pytest.mark.skipif(not CPU_HAS_FUSED_ADAM, reason="this torch has no fused Adam on CPU (<2.4)")
@pytest.mark.parametrize("max_norm", [None, 0.5])
def test_flat_adam_steps_as_torch_fused_adam_with_clipping_bit_for_bit(max_norm):
    assert steps_as_torch_adam_bit_for_bit(max_norm, {"fused": True}, fused=None).fused


@pytest.mark.parametrize("torch_settings", [{"foreach": False}, {"foreach": True}])
@pytest.mark.parametrize("max_norm", [None, 0.5])
def test_without_the_fused_kernel_flat_adam_steps_as_torch_adam_bit_for_bit(
        max_norm, torch_settings):
    """The step of a torch without a fused CPU Adam (2.2, 2.3), asked for here."""
    assert not steps_as_torch_adam_bit_for_bit(max_norm, torch_settings, fused=False).fused


def test_a_torch_without_the_fused_kernel_gets_the_unfused_step(monkeypatch):
    def no_kernel(*args, **kwargs):
        raise NotImplementedError("Could not run 'aten::_fused_adam_' with arguments from "
                                  "the 'CPU' backend")
    monkeypatch.setattr(torch, "_fused_adam_", no_kernel)
    monkeypatch.setattr(flat_adam, "fused_adam_runs",
                        flat_adam.fused_adam_runs.__wrapped__)   # asked afresh, not cached
    net = SeparateActorCritic(4, 2)
    flat = FlatAdam(net, lr=1e-3)
    before = flat.flat.clone()
    loss_of(net, 0).backward()
    flat.step()
    assert not flat.fused and flat.steps == 1 and not torch.equal(flat.flat, before)


def test_a_network_of_several_dtypes_is_refused_in_one_line():
    net = torch.nn.Sequential(torch.nn.Linear(4, 2), torch.nn.Linear(2, 2).double())
    with pytest.raises(UserError, match="one float dtype"):
        FlatAdam(net, lr=1e-3)


def test_flat_adam_resumes_from_its_own_state_or_torch_adams():
    torch.manual_seed(0)
    net = SeparateActorCritic(4, 2)
    adam = torch.optim.Adam(copy.deepcopy(net).parameters(), lr=1e-3)
    reference = adam.param_groups[0]["params"]
    for step in range(3):
        adam.zero_grad()
        loss = sum((p ** 2).sum() for p in reference) * (step + 1)
        loss.backward()
        adam.step()
    flat = FlatAdam(copy.deepcopy(net), lr=1e-3)
    flat.load_state_dict(adam.state_dict())
    assert flat.steps == 3
    torch.testing.assert_close(flat.exp_avg, torch.cat([adam.state[p]["exp_avg"].reshape(-1)
                                                        for p in reference]))
    again = FlatAdam(copy.deepcopy(net), lr=1e-3)
    again.load_state_dict(flat.state_dict())
    assert again.steps == 3 and torch.equal(again.exp_avg_sq, flat.exp_avg_sq)
    fresh = FlatAdam(copy.deepcopy(net), lr=1e-3)
    fresh.load_state_dict(torch.optim.Adam(net.parameters()).state_dict())   # never stepped
    assert fresh.steps == 0 and not fresh.exp_avg.any()


@pytest.mark.timeout(60)
def test_a_ppo_learner_and_its_parent_never_import_torch_dynamo():
    """Building a torch.optim optimizer imports torch._dynamo (~0.7 s), which the parent
    paid before forking a ppo run's actors; neither needs it now."""
    code = """
import sys
from mptrain.launch import warmup
from mptrain.rl.config import RLConfig
from mptrain.rl.ppo import PPOStrategy
from mptrain.rl.ppo_rollout import SharedRollouts
from types import SimpleNamespace
import torch
config = RLConfig(algo="ppo", workers=1, envs_per_actor=2, n_steps=16, batch_size=16,
                  steps=64, round_steps=32)
warmup.finish(build_optimizer=PPOStrategy.builds_torch_optimizer)
from mptrain.rl.nets import SeparateActorCritic
model = SeparateActorCritic(4, 2)
strategy = PPOStrategy(config)
strategy.rollouts = SharedRollouts.create(1, 16, 2, 4)
group = SimpleNamespace(rank=0, world_size=1, barrier=lambda: None)
program = strategy.program(SimpleNamespace(config=config, group=group, model=model,
                                           progress=SimpleNamespace(advance=lambda n: None)))
program.train_round(0)
program.close()
"""
    assert not imports_dynamo(code, timeout_s=50)
