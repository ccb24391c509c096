"""Greedy evaluation plays its episodes side by side: the same returns as one at a time
(for these networks; a batched product may round logits differently in their last bits, so
an exact tie of two actions could go either way: rl/acting.py says so)."""

import pytest
import torch

gymnasium = pytest.importorskip("gymnasium")

from mptrain.rl import acting  # noqa: E402
from mptrain.rl.acting import EVAL_SEED, evaluate_greedy  # noqa: E402
from mptrain.rl.nets import SeparateActorCritic  # noqa: E402


def one_at_a_time(greedy_actions, episodes: range) -> list[float]:
    """The reference: each episode alone, one observation per forward pass."""
    env = gymnasium.make("CartPole-v1")
    returns = []
    for index in episodes:
        obs, _ = env.reset(seed=EVAL_SEED + index)
        total, ended = 0.0, False
        while not ended:
            action = int(greedy_actions(torch.as_tensor(obs).unsqueeze(0))[0])
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            ended = terminated or truncated
        returns.append(total)
    env.close()
    return returns


def balancing(obs: torch.Tensor) -> torch.Tensor:
    """Push towards where the pole falls, and how fast: every episode cut at 500 steps."""
    return (obs[:, 2] + 0.3 * obs[:, 3] > 0).long()


def leaning(obs: torch.Tensor) -> torch.Tensor:
    """Push towards where the pole leans only: episodes that fall after 25 to 70 steps."""
    return (obs[:, 2] > 0).long()


def network_policy(seed: int):
    torch.manual_seed(seed)
    model = SeparateActorCritic(4, 2, 64)
    return lambda obs: model(obs)[0].argmax(-1)


@pytest.mark.parametrize("policy", [balancing, leaning, network_policy(0), network_policy(1)],
                         ids=["balancing", "leaning", "net-0", "net-1"])
@pytest.mark.parametrize("episodes", [range(0, 12), range(1, 12, 2)], ids=["all", "odd"])
def test_side_by_side_returns_are_those_of_each_episode_alone(policy, episodes):
    reference = one_at_a_time(policy, episodes)
    with torch.no_grad():
        assert evaluate_greedy(policy, "CartPole-v1", episodes) == reference


def test_wider_than_one_batch_keeps_the_order(monkeypatch):
    whole = evaluate_greedy(leaning, "CartPole-v1", range(0, 10, 2))
    monkeypatch.setattr(acting, "EVAL_WIDTH", 2)
    assert evaluate_greedy(leaning, "CartPole-v1", range(0, 10, 2)) == whole


def test_one_forward_pass_per_step_of_the_longest_episode():
    calls, beats = [], []

    def counted(obs):
        calls.append(len(obs))
        return leaning(obs)

    returns = evaluate_greedy(counted, "CartPole-v1", range(6), beat=lambda: beats.append(1))
    assert len(set(returns)) > 1
    assert len(calls) == max(returns)          # not sum(returns): the episodes go together
    assert calls[0] == 6 and calls == sorted(calls, reverse=True)   # ended ones leave
    assert len(beats) == 6                     # one heartbeat per finished episode
