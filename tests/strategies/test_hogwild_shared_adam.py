"""Hogwild with ``share_optimizer_state`` and Adam: one Adam state (step, exp_avg, exp_avg_sq)
in shared memory, updated in place by every worker's step -- the "shared Adam" of A3C.

Scripted: ranks step one after another with known gradients, so the shared state must equal
one Adam that took every rank's gradient in turn (and, without sharing, each rank's own Adam
that took only its own). Real: after a run, the shared state is one state, and its step
counter counts the steps of every worker.
"""

import copy
import multiprocessing

import pytest
import torch
import torch.nn as nn
from torch.utils.data import TensorDataset

import mptrain
from mptrain import checkpoint as checkpoints
from mptrain.config import TrainConfig, TrainingDefaults
from mptrain.engine.optim import build_optimizer
from mptrain.launch.supervisor import Supervisor
from mptrain.strategies.hogwild import HogwildStrategy
from forking import fork_or_skip

WORLD, SIZE, LR, BETA1 = 3, 4, 0.1, 0.8


class VectorModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(-1.0, 1.0, SIZE))


def gradient_of(rank: int) -> torch.Tensor:
    return torch.arange(1.0, SIZE + 1) * (rank + 1) * (-1) ** rank


def adam_step_in_turn(rank, channel, model, strategy, turns):
    """Rank r waits for its turn, takes one optimizer step with ``gradient_of(r)``, passes
    the turn on; the last rank reports the shared state it sees."""
    torch.set_num_threads(1)
    replica = strategy.replica(model, None, torch.device("cpu"))
    optimizer = strategy.optimizer(replica)
    if not turns[rank].wait(timeout=30):
        raise RuntimeError(f"rank {rank} never got its turn")
    replica.weight.grad = gradient_of(rank)
    optimizer.step()
    # Event.set() after the step: the next rank's wait() happens after it (a lock inside
    # the Event orders the memory on every CPU).
    turns[rank + 1].set()
    state = optimizer.state[replica.weight]
    channel.send({key: value.detach().clone() for key, value in state.items()})


def reference(shared: bool) -> tuple[torch.Tensor, dict]:
    """What the shared model must hold: one Adam over every rank's gradient in rank order
    (shared state), or a fresh Adam per rank (own state), on a private copy."""
    model = VectorModel()
    optimizer = None
    for rank in range(WORLD):
        if optimizer is None or not shared:
            optimizer = build_optimizer(model.parameters(), "adam", LR, BETA1, 0.0)
        model.weight.grad = gradient_of(rank)
        optimizer.step()
    return model.weight.detach().clone(), optimizer.state[model.weight]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("shared", [True, False], ids=["shared-state", "own-state"])
def test_every_rank_updates_the_one_shared_adam_state(shared):
    config = TrainConfig.from_settings(dict(strategy="hogwild", workers=WORLD, lr=LR,
                                            optimizer="adam", momentum=BETA1,
                                            share_optimizer_state=shared),
                                       TrainingDefaults())
    model = VectorModel()
    model.share_memory()
    strategy = HogwildStrategy(config)
    strategy.prepare(model)
    assert (strategy.shared_optimizer_state is not None) == shared
    method = fork_or_skip()
    context = multiprocessing.get_context(method)
    turns = [context.Event() for _ in range(WORLD + 1)]
    turns[0].set()
    seen = {}
    result = Supervisor(method, on_message=seen.__setitem__).run(
        adam_step_in_turn, [(model, strategy, turns)] * WORLD)

    assert result.ok, [f.describe() for f in result.failures]
    want_weight, want_state = reference(shared)
    assert torch.equal(model.weight.detach(), want_weight)
    if shared:
        # The parent's shared tensors hold every rank's update ...
        [state] = strategy.shared_optimizer_state
        assert state["step"].item() == WORLD
        for key in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(state[key], want_state[key]), key
        # ... and the last rank saw all of them in its optimizer.
        assert seen[WORLD - 1]["step"].item() == WORLD
    else:
        for rank in range(WORLD):
            assert seen[rank]["step"].item() == 1  # each rank's own, private state


# -- a real run ---------------------------------------------------------------------------

SAMPLES, BATCH, WORKERS, EPOCHS = 96, 16, 2, 2
STEPS_PER_WORKER = EPOCHS * (SAMPLES // WORKERS // BATCH)  # 3 steps per epoch and worker


def make_data():
    generator = torch.Generator().manual_seed(4)
    inputs = torch.randn(SAMPLES, 5, generator=generator)
    targets = (inputs @ torch.randn(5, 3, generator=generator)).argmax(dim=1)
    return TensorDataset(inputs, targets)


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("shared", [True, False], ids=["shared-state", "own-state"])
def test_after_a_run_the_adam_step_counter_counts_every_workers_steps(tmp_path, shared):
    out = tmp_path / "run"
    initial = make_model()
    result = mptrain.fit(copy.deepcopy(initial), make_data(), out=out, strategy="hogwild",
                         workers=WORKERS, epochs=EPOCHS, batch_size=BATCH, lr=0.01,
                         optimizer="adam", share_optimizer_state=shared, checkpoint_every=1,
                         threads_per_worker=1)
    assert sum(e.train_samples for e in result.epochs) == EPOCHS * SAMPLES

    # The checkpoint holds every rank's optimizer state_dict, taken after the epoch's last
    # barrier: under sharing both ranks' states are the same shared tensors.
    saved = checkpoints.load(out)
    assert len(saved.ranks) == WORKERS
    per_rank = [rank["optimizer"]["state"] for rank in saved.ranks]
    # The workers take the epoch's batches from one queue: together they take every one,
    # each as many as its core allowed -- on a loaded machine perhaps all of them, and then
    # the other's own optimizer never made a state.
    total = WORKERS * STEPS_PER_WORKER
    parameters = len(list(initial.parameters()))
    if shared:
        for states in per_rank:
            assert len(states) == parameters
            for state in states.values():
                # Every worker's steps land in the one counter. Hogwild increments it without
                # a lock, so two workers stepping at the same instant can lose one increment
                # (seen: 17 of 1,920 in a 10-epoch run), never half of them.
                assert total / 2 < state["step"].item() <= total
                assert state["exp_avg"].abs().sum() > 0 and state["exp_avg_sq"].abs().sum() > 0
    else:
        stepped = [states for states in per_rank if states]
        assert all(len(states) == parameters for states in stepped)
        assert all(state["exp_avg"].abs().sum() > 0 for states in stepped
                   for state in states.values())
        for index in range(parameters):
            assert sum(states[index]["step"].item() for states in stepped) == total
    for index in per_rank[0] if all(per_rank) else ():
        same = all(torch.equal(per_rank[0][index][key], per_rank[1][index][key])
                   for key in ("step", "exp_avg", "exp_avg_sq"))
        assert same == shared, index
