"""The dqn learner just past ``learning_starts``: before any row is readable it waits."""

from types import SimpleNamespace

import torch

from mptrain.rl.dqn import DQNProgram
from mptrain.rl.replay import SharedReplay


def test_the_learner_waits_while_no_row_is_readable():
    # Two actors with 60 rows each: 120 transitions, past learning_starts=100, but every
    # row is within the 64 newest of its segment, so none may be read yet.
    replay = SharedReplay.create(2_000, obs_dim=4, actors=2)
    for actor in (0, 1):
        for _ in range(60):
            replay.add(actor, torch.zeros(4), 0, 1.0, torch.zeros(4), False)
    learner = object.__new__(DQNProgram)
    learner.config = SimpleNamespace(train_every=2, learning_starts=100, batch_size=8)
    learner.replay, learner.updates = replay, 0
    learner.generator = torch.Generator().manual_seed(0)
    assert replay.sample(8, learner.generator) is None
    assert learner.learn_up_to(replay.total()) == 0.0
    assert learner.updates == 0   # it learns once rows are readable, at a later call
