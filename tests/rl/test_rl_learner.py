"""The dqn learner: which update or publication comes next is fixed by step counts."""

from types import SimpleNamespace

import torch
import torch.nn as nn

from mptrain.rl.dqn import DQNProgram
from mptrain.rl.published import PublishedPolicy



def scripted_learner(**settings) -> tuple[DQNProgram, list]:
    """A learner whose update and publication only record what they were asked."""
    calls = []
    learner = object.__new__(DQNProgram)
    learner.config = SimpleNamespace(**settings)
    learner.updates, learner.published = 0, -1
    learner.actor, learner.actors = None, 1
    learner.model = None
    learner.progress = SimpleNamespace(beat=lambda: None)

    def update(first, end):
        calls.append(("update", first, end))
        learner.updates += 1
        return 1.0

    learner.update = update
    learner.wait_for_rows = lambda step, limit, margin: calls.append(("wait", step, margin))
    learner.policy = SimpleNamespace(
        publish=lambda model, version: calls.append(("publish", version)))
    return learner, calls


def test_updates_and_publications_come_in_the_order_of_the_steps_they_are_due_at():
    learner, calls = scripted_learner(learning_starts=4, train_every=2, policy_every=4,
                                      buffer_size=5)
    assert learner.learn_until(12) == 4.0
    done = [c for c in calls if c[0] != "wait"]
    # version v: every update due by step (v + 1) * 4; update k: due at 4 + 2 (k + 1),
    # drawing from the newest 5 steps before it
    assert done == [("publish", 0), ("update", 1, 6), ("update", 3, 8), ("publish", 1),
                    ("update", 5, 10), ("update", 7, 12), ("publish", 2)]
    # each waits for the rows it needs first; only an update reads rows (the margin)
    assert calls[:2] == [("wait", 4, False), ("publish", 0)]
    assert calls[2:4] == [("wait", 6, True), ("update", 1, 6)]
    made = len(calls)
    assert learner.learn_until(13) == 0.0   # the next update is due at 14
    assert len(calls) == made


def test_a_run_split_at_other_limits_does_the_same_work():
    whole, whole_calls = scripted_learner(learning_starts=3, train_every=3, policy_every=5,
                                          buffer_size=100)
    whole.learn_until(60)
    parts, part_calls = scripted_learner(learning_starts=3, train_every=3, policy_every=5,
                                         buffer_size=100)
    for limit in (7, 8, 30, 31, 59, 60):
        parts.learn_until(limit)
    assert [c for c in part_calls if c[0] != "wait"] == \
        [c for c in whole_calls if c[0] != "wait"]


def test_a_published_version_is_what_actors_load_until_it_is_overwritten():
    online = nn.Linear(3, 2)
    policy = PublishedPolicy.create(online)
    assert policy.newest() == -1
    acting = nn.Linear(3, 2)
    policy.load_into(acting, -2)   # before any publication: the initial network
    assert torch.equal(acting.weight, online.weight)
    with torch.no_grad():
        online.weight.add_(1.0)
    policy.publish(online, 0)
    assert policy.newest() == 0
    policy.load_into(acting, -1)  # the other slot still holds version -1
    assert not torch.equal(acting.weight, online.weight)
    policy.load_into(acting, 0)
    assert torch.equal(acting.weight, online.weight)
    saved = policy.state()
    again = PublishedPolicy.create(nn.Linear(3, 2))
    again.load_state(saved)
    assert again.newest() == 0 and torch.equal(again.slots[0][0], online.weight)


def test_a_checkpoint_of_the_old_replay_layout_is_refused_in_one_line():
    import pytest

    from mptrain.errors import UserError
    from mptrain.rl.dqn import DQNStrategy

    old = SimpleNamespace(ranks=[{"rng": None, "replay": {}, "updates": 3}, {"rng": None}])
    with pytest.raises(UserError, match="earlier mptrain.*start a new run"):
        DQNStrategy.check_checkpoint(old)
    DQNStrategy.check_checkpoint(SimpleNamespace(ranks=[{"published": 2}, {}]))


def test_the_target_follows_the_online_network_by_target_tau_every_target_every_updates():
    # --target-tau 0.25 --target-every 2: after the 2nd update (not the 1st) the target
    # moves a quarter of the way to the online network, as stable-baselines3's tau.
    from mptrain.rl.config import RLConfig
    from mptrain.rl.plain_adam import PlainAdam
    from mptrain.rl.replay import Batch

    learner = object.__new__(DQNProgram)
    learner.config = RLConfig(algo="dqn", target_tau=0.25, target_every=2, batch_size=4,
                              buffer_size=8, return_steps=1)   # the fake replay's sample
    learner.model, learner.target = nn.Linear(3, 2), nn.Linear(3, 2)
    learner.optimizer = PlainAdam(learner.model.parameters(), lr=0.1)
    learner.sampler, learner.updates = torch.Generator().manual_seed(0), 0
    batch = Batch(torch.randn(4, 3), torch.tensor([0, 1, 0, 1]), torch.ones(4),
                  torch.randn(4, 3), torch.zeros(4))
    learner.replay = SimpleNamespace(sample=lambda first, end, size, generator: batch)
    start = learner.target.weight.detach().clone()
    learner.update(0, 4)
    assert torch.equal(learner.target.weight, start)            # not yet due
    learner.update(0, 4)
    online = learner.model.weight.detach()
    assert torch.allclose(learner.target.weight, start + 0.25 * (online - start))
    assert not torch.allclose(learner.target.weight, online)


def test_the_banner_says_how_the_target_follows():
    from mptrain.rl.config import RLConfig
    from mptrain.rl.dqn import target_words

    assert target_words(RLConfig(algo="dqn")) == "target copied every 512 updates"
    assert target_words(RLConfig(algo="dqn", target_tau=0.005, target_every=1)) == \
        "target moved 0.005 of the way every update"
