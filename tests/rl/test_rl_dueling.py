"""dqn's dueling head (``dueling``, ``--dueling``): the network, the setting from flags,
file and ``fit()``, a run that writes and resumes it, a checkpoint of before, and the
mistakes refused in one line."""

from pathlib import Path

import pytest
import torch
import torch.nn as nn

from mptrain.errors import UserError
from mptrain.rl.config import RLConfig, applicable_rl_settings
from mptrain.rl.envs import EnvShape
from mptrain.rl.nets import ActorCritic, DuelingQNetwork, QNetwork, build_network, run_network

SHAPE = EnvShape("test", obs_dim=4, n_actions=3)
#: The value that asks for something: the head where the default has none (or, with the
#: default on, none where it has one).
ASKED = not RLConfig.dueling


class ScreeningDuelingNet(nn.Module):
    """The architecture as the dueling screening runs built it through ``--net``: a seed
    must give the built-in head the same network, bit for bit."""

    def __init__(self, obs_dim, n_actions, hidden=128):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(obs_dim, hidden), nn.ReLU(),
                                   nn.Linear(hidden, hidden), nn.ReLU())
        self.value = nn.Linear(hidden, 1)
        self.advantage = nn.Linear(hidden, n_actions)

    def forward(self, obs):
        h = self.trunk(obs)
        a = self.advantage(h)
        return self.value(h) + a - a.mean(-1, keepdim=True)


def make_screening_net(obs_dim, n_actions):
    return ScreeningDuelingNet(obs_dim, n_actions, 256)


def test_q_is_the_value_plus_the_advantages_less_their_mean():
    torch.manual_seed(0)
    net = build_network("dqn", SHAPE, 16, dueling=True)
    assert type(net) is DuelingQNetwork
    obs = torch.randn(5, 4)
    features = net.trunk(obs)
    value, advantages = net.value(features), net.advantage(features)
    q = net(obs)
    assert q.shape == (5, 3)
    assert torch.allclose(q, value + advantages - advantages.mean(-1, keepdim=True))
    # Q's mean over the actions is V: the advantages are centred.
    assert torch.allclose(q.mean(-1, keepdim=True), value, atol=1e-6)
    assert DuelingQNetwork.outputs_fit(q, 5, 3) and not DuelingQNetwork.outputs_fit(q, 5, 2)


def test_a_seed_builds_the_screening_runs_network_bit_for_bit():
    torch.manual_seed(3)
    ours = build_network("dqn", SHAPE, 32, dueling=True)
    torch.manual_seed(3)
    theirs = ScreeningDuelingNet(4, 3, 32)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(ours.state_dict().values(),
                                                 theirs.state_dict().values()))
    obs = torch.randn(7, 4)
    assert torch.equal(ours(obs), theirs(obs))


def test_the_default_dqn_network_follows_the_default_setting():
    built = run_network(RLConfig(algo="dqn"), SHAPE)
    assert type(built) is (DuelingQNetwork if RLConfig.dueling else QNetwork)
    plain = run_network(RLConfig(algo="dqn", dueling=False), SHAPE)
    # Dueling off is the seed's network as it always was: checkpoints of before load.
    assert type(plain) is QNetwork
    assert list(plain.state_dict()) == [f"layers.{i}.{p}" for i in (0, 2, 4)
                                        for p in ("weight", "bias")]
    assert type(run_network(RLConfig(algo="dqn", dueling=True), SHAPE)) is DuelingQNetwork
    # The other algorithms carry the setting unread, whatever its default.
    assert type(run_network(RLConfig(algo="a3c", dueling=True), SHAPE)) is ActorCritic
    with pytest.raises(ValueError):   # a caller's bug, not a user's mistake
        build_network("a3c", SHAPE, 16, dueling=True)


def test_the_setting_comes_from_fit_and_a_checkpoint_of_before_gets_it_off():
    from mptrain.rl.api import rl_config
    from mptrain.settings import keywords

    said = keywords({"algo": "dqn", "dueling": True}, "rl.fit()")
    assert rl_config([said]).dueling is True
    assert rl_config([keywords({"algo": "dqn"}, "rl.fit()")]).dueling is RLConfig.dueling
    old = {k: v for k, v in RLConfig(algo="dqn").as_dict().items() if k != "dueling"}
    assert RLConfig.from_dict(applicable_rl_settings(old)).dueling is False
    now = RLConfig(algo="dqn", dueling=True).as_dict()
    assert applicable_rl_settings(now)["dueling"] is True
    assert "dueling" not in applicable_rl_settings(RLConfig(algo="ppo").as_dict())
    with pytest.raises(UserError, match=r"^rl\.fit\(\): dueling is a string .'yes'. where "
                                        "true or false is expected$"):
        rl_config([keywords({"algo": "dqn", "dueling": "yes"}, "rl.fit()")])


@pytest.mark.parametrize("algo", ["a3c", "ppo"])
def test_dueling_with_another_algorithm_is_refused_in_one_line(algo, capsys):
    from user_errors import fail

    flag = "--dueling" if ASKED else "--no-dueling"
    assert fail(["rl", "--algo", algo, flag], capsys).strip() == (
        f"mptrain: error: --dueling does nothing with --algo {algo}; it is a setting of "
        "--algo dqn")


@pytest.mark.skipif(RLConfig.dueling, reason="the default builds the head: a --net run "
                                             "keeps its own network, as with --hidden")
def test_dueling_with_a_network_of_ones_own_is_refused_in_one_line(capsys):
    from user_errors import fail

    spec = f"{__file__}:make_screening_net"
    assert fail(["rl", "--algo", "dqn", "--net", spec, "--dueling"], capsys).strip() == (
        f"mptrain: error: --dueling builds mptrain's own Q-network with a dueling head; "
        f"--net '{spec}' is your network: build the head into it, or leave --dueling out")
    from mptrain.rl.api import rl_config
    from mptrain.settings import keywords

    with pytest.raises(UserError, match="^dueling builds .* leave dueling out$"):
        rl_config([keywords({"algo": "dqn", "net": spec, "dueling": True}, "rl.fit()")])
    assert RLConfig.from_dict({"algo": "dqn", "net": spec, "dueling": False}).net == spec


#: A small dqn run (3 rounds of 300 steps) with a checkpoint every round.
TINY = dict(round_steps=300, seed=5, learning_starts=200, buffer_size=1_000,
            batch_size=16, policy_every=64, eval_episodes=1, eval_every=1,
            checkpoint_every=1)


def state_of(path: Path) -> dict:
    return torch.load(path, weights_only=True)


@pytest.mark.timeout(180)
def test_a_dueling_run_writes_and_resumes_its_network(tmp_path: Path):
    pytest.importorskip("gymnasium")
    from mptrain.rl import fit

    # Two processes: the actor acts with the published copy of the learner's network.
    result = fit("CartPole-v1", "dqn", workers=2, steps=600, dueling=True,
                 out=tmp_path / "run", **TINY)
    assert result.config.dueling is True
    assert type(result.final_model) is type(result.best_model) is DuelingQNetwork
    for name in ("model.pt", "best.pt", "final.pt"):
        DuelingQNetwork(4, 2, 256).load_state_dict(state_of(tmp_path / "run" / name))
    with pytest.raises(RuntimeError):   # not the plain network's layout
        QNetwork(4, 2, 256).load_state_dict(state_of(tmp_path / "run" / "final.pt"))

    resumed = fit(resume=tmp_path / "run", steps=900)
    assert resumed.config.dueling is True and type(resumed.final_model) is DuelingQNetwork
    assert [row.epoch for row in resumed.rounds] == [1, 2, 3]
    with pytest.raises(UserError, match="^the checkpoint's network has a dueling head and "
                                        "dueling asks for none"):
        fit(resume=tmp_path / "run", steps=1_200, dueling=False)


@pytest.mark.timeout(180)
def test_a_checkpoint_from_before_the_setting_resumes_without_the_head(tmp_path: Path):
    pytest.importorskip("gymnasium")
    from mptrain.checkpoint import load, save
    from mptrain.rl import fit

    fit("CartPole-v1", "dqn", workers=1, steps=300, dueling=False, out=tmp_path / "run",
        **TINY)
    checkpoint = load(tmp_path / "run")
    del checkpoint.config["dueling"]   # as a run of before wrote it
    (tmp_path / "old").mkdir()
    save(tmp_path / "old", checkpoint)

    resumed = fit(resume=tmp_path / "old", steps=600)
    assert resumed.config.dueling is False and type(resumed.final_model) is QNetwork
    with pytest.raises(UserError, match="^the checkpoint's network has no dueling head and "
                                        "dueling asks for one"):
        fit(resume=tmp_path / "old", steps=900, dueling=True)
