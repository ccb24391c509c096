"""dqn's targets: n-step returns gathered from the one-step replay, advantage learning."""

import pytest
import torch
import torch.nn as nn

from mptrain.rl.dqn_targets import double_dqn_targets, sample_n_step, target_kind
from mptrain.rl.replay import Batch, SharedReplay

GAMMA = 0.5


def episodes_of_two_actors(ends: dict[int, str], steps: int = 24) -> SharedReplay:
    """Global steps 0..steps-1 (step g is actor g % 2's), reward g + 1, obs[0] = g and
    next_obs[0] = g + 0.5; ``ends``: the steps whose episode ends there, "terminated" or
    "truncated"."""
    buffer = SharedReplay.create(64, obs_dim=2, actors=2)
    for g in range(steps):
        actor = g % 2
        assert buffer.next_step(actor) == g
        how = ends.get(g)
        buffer.add(actor, [float(g), 0.0], g % 2, float(g + 1), [g + 0.5, 0.0],
                   done=how == "terminated", ended=how is not None)
    return buffer


def drawn(buffer, first, end, n, draws=400):
    batch = sample_n_step(buffer, first, end, draws, torch.Generator().manual_seed(0), n,
                          GAMMA)
    by_step = {}
    for i, step in enumerate(batch.obs[:, 0].long().tolist()):
        by_step[step] = (batch.rewards[i].item(), batch.next_obs[i, 0].item(),
                         batch.dones[i].item(), batch.discounts[i].item())
    return by_step


def test_a_return_sums_n_rewards_of_the_same_actor_then_bootstraps():
    rows = drawn(episodes_of_two_actors({}), 0, 24, n=3)
    # step 4 is actor 0's; its next two are 6 and 8: rewards 5, 7, 9
    assert rows[4] == (5 + GAMMA * 7 + GAMMA ** 2 * 9, 8.5, 0.0, GAMMA ** 3)
    assert rows[5] == (6 + GAMMA * 8 + GAMMA ** 2 * 10, 9.5, 0.0, GAMMA ** 3)


def test_a_return_stops_where_its_episode_ends_and_at_the_window_end():
    rows = drawn(episodes_of_two_actors({6: "terminated", 9: "truncated"}), 0, 20, n=3)
    # 4 -> 6 terminates: two rewards, nothing to bootstrap from
    assert rows[4] == (5 + GAMMA * 7, 6.5, 1.0, GAMMA ** 2)
    assert rows[6] == (7, 6.5, 1.0, GAMMA)
    # 7 -> 9 is cut by a time limit: two rewards, then the value where it was cut
    assert rows[7] == (8 + GAMMA * 10, 9.5, 0.0, GAMMA ** 2)
    assert rows[8] == (9 + GAMMA * 11 + GAMMA ** 2 * 13, 12.5, 0.0, GAMMA ** 3)
    # the window ends at 20: step 17's next are 19 (in it) and 21 (not)
    assert rows[17] == (18 + GAMMA * 20, 19.5, 0.0, GAMMA ** 2)
    assert rows[19] == (20, 19.5, 0.0, GAMMA)


def test_one_step_draws_what_the_plain_sample_draws():
    buffer = episodes_of_two_actors({6: "terminated", 9: "truncated"})
    plain = buffer.sample(2, 22, 64, torch.Generator().manual_seed(3))
    one = sample_n_step(buffer, 2, 22, 64, torch.Generator().manual_seed(3), 1, GAMMA)
    for name in ("obs", "actions", "rewards", "next_obs", "dones"):
        assert torch.equal(getattr(plain, name), getattr(one, name))
    assert torch.equal(one.discounts, torch.full((64,), GAMMA))


def test_a_resumed_buffer_ends_each_actors_last_episode():
    # A resumed run's actors start fresh episodes: an n-step return must not run on
    # into them from the last row before the checkpoint.
    buffer = episodes_of_two_actors({}, steps=10)
    resumed = SharedReplay.create(64, obs_dim=2, actors=2)
    resumed.load_state(buffer.state())
    ended = resumed.ends.nonzero().flatten().tolist()
    assert [resumed.obs[row, 0].item() for row in ended] == [8.0, 9.0]
    assert resumed.dones.sum() == 0   # still bootstrapped from, as at a time limit


def test_a_checkpoint_without_ends_finds_them_where_episodes_do_not_continue():
    buffer = SharedReplay.create(64, obs_dim=2, actors=1)
    obs = [0.0, 1.0]
    for step in range(8):
        reset = step in (2, 5)     # truncated after step 2 and 5: the next obs is a reset
        next_obs = [step + 1.0, 1.0]
        buffer.add(0, obs, 0, 1.0, next_obs, done=step == 6)
        obs = [100.0 + step, 0.0] if reset else next_obs
    old = {k: v for k, v in buffer.state().items() if k != "ends"}
    resumed = SharedReplay.create(64, obs_dim=2, actors=1)
    resumed.load_state(old)
    assert resumed.ends[:8].nonzero().flatten().tolist() == [2, 5, 6, 7]


def test_advantage_learning_lowers_only_a_non_greedy_actions_target():
    online, target = nn.Linear(2, 2), nn.Linear(2, 2)
    with torch.no_grad():
        target.weight.zero_()
        target.bias.copy_(torch.tensor([3.0, 1.0]))   # action 0 greedy, gap 2
    batch = Batch(torch.zeros(2, 2), torch.tensor([0, 1]), torch.ones(2), torch.zeros(2, 2),
                  torch.tensor([1.0, 1.0]))            # terminal: the target is the reward
    assert double_dqn_targets(online, target, batch, 0.9).tolist() == [1.0, 1.0]
    assert double_dqn_targets(online, target, batch, 0.9, 0.5).tolist() == [1.0, 0.0]


def test_the_banner_names_the_targets():
    from mptrain.rl.config import RLConfig

    assert target_kind(RLConfig(algo="dqn", return_steps=1)) == ""
    assert target_kind(RLConfig(algo="dqn")) == "3-step returns, "   # the default
    assert target_kind(RLConfig(algo="dqn", return_steps=3, advantage_learning=0.9)) == \
        "3-step returns, advantage learning 0.9, "


@pytest.mark.parametrize("changes", [dict(return_steps=0), dict(advantage_learning=1.0),
                                     dict(advantage_learning=-0.1)])
def test_bad_target_settings_are_refused(changes):
    from mptrain.errors import UserError
    from mptrain.rl.config import RLConfig

    with pytest.raises(UserError):
        RLConfig(algo="dqn", **changes)


def test_a_dqn_checkpoint_from_before_n_step_returns_resumes_with_one_step_returns():
    # Its run learned one-step targets; today's default (3) would change it midway.
    from mptrain.rl.config import RLConfig, applicable_rl_settings

    old = {k: v for k, v in RLConfig(algo="dqn").as_dict().items() if k != "return_steps"}
    assert RLConfig.from_dict(applicable_rl_settings(old)).return_steps == 1
    now = RLConfig(algo="dqn", return_steps=5).as_dict()
    assert applicable_rl_settings(now)["return_steps"] == 5
    assert "return_steps" not in applicable_rl_settings(RLConfig(algo="ppo").as_dict())
