"""Real runs of both algorithms on CartPole: learning, supervision, checkpoints."""

import statistics
import sys
from pathlib import Path

import pytest
import torch

gymnasium = pytest.importorskip("gymnasium")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared helpers
from run_watch import live_children  # noqa: E402

from mptrain.errors import WorkerFailedError  # noqa: E402
from mptrain.rl import fit  # noqa: E402
from mptrain.rl.acting import EVAL_SEED  # noqa: E402
from mptrain.checkpoint import load  # noqa: E402

EVAL_EPISODES = 10


def random_policy_return(episodes: int = EVAL_EPISODES) -> float:
    """The mean return of uniformly random actions on the evaluation episodes' seeds."""
    env = gymnasium.make("CartPole-v1")
    env.action_space.seed(0)
    returns = []
    for index in range(episodes):
        env.reset(seed=EVAL_SEED + index)
        total, ended = 0.0, False
        while not ended:
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            total += reward
            ended = terminated or truncated
        returns.append(total)
    return statistics.fmean(returns)


@pytest.mark.timeout(120)
def test_a3c_learns_and_is_deterministic_with_one_actor():
    # 10,000 steps: seed 3's greedy return is ~105 over the 10 episodes (random: ~22);
    # test_rl_learning's slow a3c run shows it reaching 400 at 20,000.
    first = fit("CartPole-v1", "a3c", workers=1, steps=10_000, round_steps=5_000, seed=3,
                eval_episodes=EVAL_EPISODES)
    baseline = random_policy_return()
    assert baseline < 30
    assert first.eval_return > baseline + 40
    rising = [row.extras["return_mean"] for row in first.rounds]
    assert rising[-1] > rising[0]
    # Determinism does not need a policy that learned: two short runs of two rounds each
    # (every update of both bitwise the same) instead of the long run twice.
    short = dict(workers=1, steps=2_000, round_steps=1_000, seed=3, eval_episodes=1)
    once, again = fit("CartPole-v1", "a3c", **short), fit("CartPole-v1", "a3c", **short)
    assert once.summary["env_steps"] == again.summary["env_steps"] == 2_000
    for a, b in zip(once.model.state_dict().values(), again.model.state_dict().values()):
        assert torch.equal(a, b)


@pytest.mark.timeout(120)
def test_dqn_learns_with_one_actor():
    # 3,000 steps with an update every 2 (the default): seed 3's greedy return is ~215 over
    # the 10 episodes (~17 after the first 1,000 steps; random actions ~22). It was 6,000
    # steps with an update every step, four times the updates for the same proof.
    result = fit("CartPole-v1", "dqn", workers=1, steps=3_000, round_steps=1_500, seed=3,
                 learning_starts=500, eps_steps=3_000, buffer_size=10_000, batch_size=64,
                 target_every=200, train_every=2, eval_episodes=EVAL_EPISODES)
    assert result.eval_return > random_policy_return() + 30
    assert result.summary["env_steps"] == 3_000
    # one update per train_every transitions past learning_starts, whatever the number of
    # actors
    assert sum(row.extras["updates"] for row in result.rounds) == (3_000 - 500) // 2


@pytest.mark.timeout(120)
def test_two_dqn_actors_fill_the_shared_buffer():
    result = fit("CartPole-v1", "dqn", workers=2, steps=4_000, round_steps=2_000, seed=1,
                 learning_starts=500, eps_steps=2_000, buffer_size=4_000, batch_size=32,
                 train_every=4, eval_episodes=2)
    assert result.summary["env_steps"] == 4_000   # step g is actor g % actors's: no overshoot
    assert sum(row.extras["updates"] for row in result.rounds) == (4_000 - 500) // 4


def curve(result) -> list:
    """Everything a run's rows say that does not depend on time."""
    keys = ("episodes", "return_mean", "return_max", "eval_return", "updates", "epsilon")
    return [(row.train_loss, *(row.extras[key] for key in keys)) for row in result.rounds]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_seed_names_a_dqn_run_bit_for_bit():
    # Two actors and a learner in three processes, twice, then one process that does
    # everything: the actors' steps, the updates and the rows they draw are fixed by step
    # counts, so the curves and the networks are the same bit for bit.
    settings = dict(steps=1_500, round_steps=500, seed=7, eval_episodes=2, eval_every=1,
                    learning_starts=300, buffer_size=2_000, batch_size=32, policy_every=64)
    once = fit("CartPole-v1", "dqn", workers=3, **settings)
    again = fit("CartPole-v1", "dqn", workers=3, **settings)
    assert curve(once) == curve(again)
    assert len({row.extras["episodes"] for row in once.rounds}) > 1   # not a constant
    for a, b in zip(once.model.state_dict().values(), again.model.state_dict().values()):
        assert torch.equal(a, b)
    # One actor: the same in one process (workers=1) as beside a learner (workers=2).
    alone = fit("CartPole-v1", "dqn", workers=1, **settings)
    beside = fit("CartPole-v1", "dqn", workers=2, **settings)
    assert curve(alone) == curve(beside)


@pytest.mark.timeout(120)
def test_n_step_and_advantage_learning_keep_a_seed_naming_the_dqn_run():
    # The n-step returns are gathered by global step, cut at the update's window: one
    # process acting and learning gives the same run as an actor beside a learner.
    settings = dict(steps=1_200, round_steps=600, seed=7, eval_episodes=1, eval_every=1,
                    learning_starts=300, buffer_size=2_000, batch_size=32, policy_every=64,
                    return_steps=3, advantage_learning=0.5)
    alone = fit("CartPole-v1", "dqn", workers=1, **settings)
    beside = fit("CartPole-v1", "dqn", workers=2, **settings)
    assert curve(alone) == curve(beside)
    for a, b in zip(alone.final_model.state_dict().values(),
                    beside.final_model.state_dict().values()):
        assert torch.equal(a, b)
    plain = fit("CartPole-v1", "dqn", workers=1, **{**settings, "return_steps": 1,
                                                   "advantage_learning": 0.0})
    assert curve(plain) != curve(alone)


@pytest.mark.timeout(120)
def test_a3c_dead_actor_stops_the_run_with_its_traceback():
    with pytest.raises(WorkerFailedError) as caught:
        fit(f"{Path(__file__).with_name('faulty_env.py')}:make", "a3c", workers=2,
            steps=50_000, round_steps=5_000, seed=0, eval_episodes=1)
    message = str(caught.value)
    assert "worker rank 1" in message
    assert "RuntimeError: the environment exploded in rank 1" in message
    assert "faulty_env.py" in message   # the actor's traceback, not only its last line
    assert live_children() == []   # every actor was reaped


@pytest.mark.timeout(180)
@pytest.mark.parametrize("algo", ["a3c", "dqn"])
def test_checkpoint_and_resume_continue_the_run(tmp_path: Path, algo):
    settings = dict(workers=2, round_steps=1_000, seed=0, eval_episodes=2)
    if algo == "dqn":
        settings.update(learning_starts=500, buffer_size=4_000, batch_size=32, train_every=4)
    first = fit("CartPole-v1", algo, steps=2_000, out=tmp_path, checkpoint_every=1,
                **settings)
    checkpoint = load(tmp_path)
    assert checkpoint.epoch == 2 and checkpoint.strategy == algo
    if algo == "dqn":
        assert int(checkpoint.ranks[0]["replay"]["counts"].sum()) == \
            first.summary["env_steps"]
    else:
        assert len(checkpoint.ranks[0]["optimizer"]) == len(list(first.model.parameters()))
    assert torch.equal(checkpoint.model[next(iter(checkpoint.model))],
                       first.final_model.state_dict()[next(iter(checkpoint.model))])

    resumed = fit(resume=tmp_path, steps=4_000)
    assert [row.epoch for row in resumed.rounds] == [1, 2, 3, 4]
    assert resumed.rounds[:2] == first.rounds
    assert resumed.rounds[-1].extras["env_steps"] >= 4_000
    assert load(tmp_path).epoch == 4
    for name in ("summary.json", "metrics.jsonl", "model.pt", "best.pt", "final.pt",
                 "curves.png"):
        assert (tmp_path / name).is_file()
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.timeout(120)
def test_a3c_trains_a_value_head_of_shape_n_by_1_as_one_of_shape_n():
    nets = Path(__file__).with_name("test_rl_nets.py")
    short = dict(workers=1, steps=600, round_steps=300, seed=2, eval_episodes=1)
    column = fit("CartPole-v1", "a3c", net=f"{nets}:make_column_value", **short)
    flat = fit("CartPole-v1", "a3c", net=f"{nets}:make_squeezed_value", **short)
    for a, b in zip(column.model.state_dict().values(), flat.model.state_dict().values()):
        assert torch.equal(a, b)


@pytest.mark.timeout(120)
def test_a_run_cut_short_of_a_round_resumes_to_the_steps_asked(tmp_path: Path):
    # `--steps 600` in rounds of 1,000, resumed to 900: refused "already at round 1 ...
    # give --steps above 1000" (issue 57); the second round is the 300 steps left.
    short = dict(workers=1, round_steps=1_000, seed=0, eval_episodes=1)
    fit("CartPole-v1", "a3c", steps=600, out=tmp_path, checkpoint_every=1, **short)
    resumed = fit(resume=tmp_path, steps=900)
    assert [(row.epoch, row.train_samples) for row in resumed.rounds] == [(1, 600), (2, 300)]
    assert resumed.rounds[-1].extras["env_steps"] == 900
