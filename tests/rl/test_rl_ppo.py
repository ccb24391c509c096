"""PPO runs: a seed names a run, checkpoints resume, bad settings are refused in one line."""

import copy
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

gymnasium = pytest.importorskip("gymnasium")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared helpers
from run_watch import live_children  # noqa: E402

from mptrain.checkpoint import load  # noqa: E402
from mptrain.errors import UserError, WorkerFailedError  # noqa: E402
from mptrain.rl import fit  # noqa: E402
from mptrain.rl.config import RLConfig  # noqa: E402

SHORT = dict(steps=2_048, round_steps=1_024, envs_per_actor=2, n_steps=64, batch_size=64,
             update_epochs=2, eval_episodes=2, eval_every=1)


def curve(result) -> list:
    """Everything a run's rows say that does not depend on time."""
    keys = ("env_steps", "episodes", "return_mean", "return_max", "eval_return", "updates",
            "approx_kl", "clip_fraction", "entropy", "value_loss")
    return [(row.train_loss, *(row.extras[key] for key in keys)) for row in result.rounds]


def same_network(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.model.state_dict().values(),
                                                 b.model.state_dict().values()))


@pytest.mark.timeout(180)
def test_a_seed_names_a_ppo_run_bit_for_bit():
    once = fit("CartPole-v1", "ppo", workers=2, seed=7, **SHORT)
    again = fit("CartPole-v1", "ppo", workers=2, seed=7, **SHORT)
    assert curve(once) == curve(again)
    assert same_network(once, again)
    # two rounds of 1,024 steps: 8 updates of 2 x 2 x 64 transitions, each 2 epochs of 4
    # minibatches of 64
    assert [row.extras["env_steps"] for row in once.rounds] == [1_024, 2_048]
    assert sum(row.extras["updates"] for row in once.rounds) == 8 * 2 * 4
    assert once.rounds[0].extras["return_mean"] != once.rounds[1].extras["return_mean"]
    other = fit("CartPole-v1", "ppo", workers=2, seed=8, **SHORT)
    assert curve(other) != curve(once)


@pytest.mark.timeout(180)
def test_checkpoint_and_resume_continue_a_ppo_run(tmp_path: Path):
    settings = dict(workers=2, seed=0, **{**SHORT, "eval_every": None})
    first = fit("CartPole-v1", "ppo", out=tmp_path, checkpoint_every=1, **settings)
    checkpoint = load(tmp_path)
    assert checkpoint.epoch == 2 and checkpoint.strategy == "ppo"
    assert checkpoint.ranks[0]["updates_done"] == checkpoint.ranks[1]["updates_done"] == 8
    assert checkpoint.ranks[0]["optimizer"]["steps"] == 8 * 2 * 4   # the learner's Adam
    assert checkpoint.ranks[0]["optimizer"]["exp_avg"].any()
    assert "optimizer" not in checkpoint.ranks[1]

    resumed = fit(resume=tmp_path, steps=4_096)
    assert [row.epoch for row in resumed.rounds] == [1, 2, 3, 4]
    assert resumed.rounds[:2] == first.rounds
    assert [row.extras["env_steps"] for row in resumed.rounds] == [1_024, 2_048, 3_072, 4_096]
    assert load(tmp_path).ranks[0]["updates_done"] == 16
    assert not same_network(SimpleNamespace(model=first.final_model),   # it went on learning
                            SimpleNamespace(model=resumed.final_model))
    for name in ("summary.json", "metrics.jsonl", "model.pt", "best.pt", "final.pt",
                 "curves.png"):
        assert (tmp_path / name).is_file()
    # Another rollout size would run the wrong number of updates from here on (counted in
    # whole rollouts of the checkpoint's size): refused in one line, nothing run.
    for changed in (dict(envs_per_actor=4), dict(n_steps=32)):
        with pytest.raises(UserError, match="resumes with the rollout it was counted in"):
            fit(resume=tmp_path, steps=8_192, **changed)
    assert load(tmp_path).ranks[0]["updates_done"] == 16


@pytest.mark.timeout(120)
def test_a_dead_ppo_actor_stops_the_run_with_its_traceback():
    with pytest.raises(WorkerFailedError) as caught:
        fit(f"{Path(__file__).with_name('faulty_env.py')}:make", "ppo", workers=2,
            steps=50_000, round_steps=5_000, seed=0, eval_episodes=1, envs_per_actor=1)
    message = str(caught.value)
    assert "worker rank 1" in message
    assert "RuntimeError: the environment exploded in rank 1" in message
    assert live_children() == []   # the learner waiting at the barrier was reaped too


def env_log(path: Path) -> tuple[dict, set]:
    """The environments ``closing_env`` made (id: the torch seed of the process that made
    it) and those it closed."""
    made, closed = {}, set()
    for line in path.read_text().splitlines():
        event, env, seed = line.split()
        if event == "made":
            made[env] = int(seed)
        else:
            closed.add(env)
    return made, closed


@pytest.mark.timeout(180)
def test_every_environment_of_a_ppo_run_is_closed_at_its_end_and_on_failure(tmp_path,
                                                                           monkeypatch):
    log = tmp_path / "envs.log"
    monkeypatch.setenv("MPTRAIN_TEST_ENV_LOG", str(log))
    envs = Path(__file__).with_name("closing_env.py")
    fit(f"{envs}:make", "ppo", workers=2, seed=0, **SHORT)
    made, closed = env_log(log)
    for rank in (0, 1):   # each actor's vector environments and evaluation episodes
        assert sum(1 for seed in made.values() if seed == rank) >= 2 + 1
    assert set(made) <= closed
    log.unlink()
    with pytest.raises(WorkerFailedError, match="exploded in rank 1"):
        fit(f"{envs}:make_exploding", "ppo", workers=2, steps=50_000, round_steps=5_000,
            seed=0, eval_episodes=1, envs_per_actor=2)
    made, closed = env_log(log)
    failed = {env for env, seed in made.items() if seed == 1}
    assert len(failed) == 2 and failed <= closed   # the actor whose environment raised


@pytest.mark.parametrize("changes, words", [
    (dict(batch_size=0), "--batch-size must be a positive integer"),
    (dict(round_steps=1_000), "--round-steps 1000 is smaller than one ppo rollout (2048 = "
                              "--workers 2 x --envs-per-actor 8 x --n-steps 128); give at "
                              "least 2048"),
    (dict(envs_per_actor=0), "--envs-per-actor must be a positive integer"),
    (dict(update_epochs=0), "--update-epochs must be a positive integer"),
    (dict(clip_coef=0.0), "--clip-coef"),
    (dict(target_kl=-0.1), "--target-kl"),
    (dict(anneal_lr="yes"), "--anneal-lr"),
])
def test_bad_ppo_settings_are_refused_in_one_line(changes, words):
    with pytest.raises(UserError) as caught:
        RLConfig(algo="ppo", n_steps=128, **changes)
    assert words in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("algo, changes, words", [
    ("ppo", dict(round_steps=100), "round_steps 100 is smaller than one ppo rollout (256 = "
                                   "workers 1 x envs_per_actor 8 x n_steps 32); give at "
                                   "least 256"),
    ("dqn", dict(buffer_size=10, batch_size=64), "buffer_size 10 is smaller than batch_size 64"),
])
def test_from_python_the_algorithms_refusals_name_the_keywords(algo, changes, words):
    with pytest.raises(UserError) as caught:
        fit("CartPole-v1", algo, workers=1, **changes)
    assert str(caught.value) == words


def test_a_minibatch_is_at_most_the_rollout():
    from mptrain.rl.ppo import minibatch_size

    assert minibatch_size(RLConfig(algo="ppo", workers=1, envs_per_actor=1, n_steps=32,
                                   batch_size=256)) == 32
    assert minibatch_size(RLConfig(algo="ppo", workers=2, envs_per_actor=4, n_steps=32,
                                   batch_size=64)) == 64


def test_ppo_defaults_are_its_own_and_the_others_keep_theirs():
    ppo, a3c, dqn = RLConfig(algo="ppo"), RLConfig(algo="a3c"), RLConfig(algo="dqn")
    assert (a3c.n_steps, a3c.gae_lambda, a3c.max_grad_norm, a3c.gamma) == (20, 1.0, 40.0, 0.99)
    assert dqn.batch_size == 64 and a3c.update_epochs is None
    assert ppo.max_grad_norm == 0.5 and ppo.update_epochs >= 1
    # chosen on held-out seeds (docs/rl.md, "ppo's learning rate, gamma and lambda")
    assert (ppo.learning_rate, ppo.gamma, ppo.gae_lambda) == (2e-3, 0.99, 0.95)
    assert RLConfig(algo="ppo", gamma=0.9).gamma == 0.9     # a said value wins
    assert RLConfig.from_dict(ppo.as_dict()) == ppo


@pytest.mark.parametrize("argv, words", [
    (["--envs-per-actor", "0"], "--envs-per-actor must be a positive integer"),
    (["--clip-coef", "-1"], "--clip-coef"),
    (["--update-epochs", "1.5"], "--update-epochs"),
    (["--anneal-lr", "maybe"], "Got unexpected extra argument"),
])
def test_bad_ppo_flags_are_one_line_and_exit_2(capsys, argv, words):
    from mptrain.cli import main

    with pytest.raises(SystemExit) as done:
        main(["rl", "--algo", "ppo", *argv])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


def test_ppo_takes_its_settings_from_a_config_file(tmp_path, monkeypatch):
    import mptrain.rl.api
    from mptrain.cli import main

    calls = []
    monkeypatch.setattr(mptrain.rl.api, "run", lambda request: calls.append(request)
                        or request.family.result(request.model, request.config))
    path = tmp_path / "ppo.toml"
    path.write_text('algo = "ppo"\n[run]\nenvs-per-actor = 2\nanneal-lr = false\n'
                    'clip-value = true\ntarget-kl = 0.02\nupdate-epochs = 5\n')
    assert main(["rl", "--config", str(path), "--update-epochs", "3"]) == 0
    [request] = calls
    config = request.config
    assert (config.algo, config.envs_per_actor, config.anneal_lr, config.clip_value,
            config.target_kl, config.update_epochs) == ("ppo", 2, False, True, 0.02, 3)
    assert config.gae_lambda == 0.95    # ppo's default, not a3c's


def test_the_round_line_shows_the_learners_kl_and_clipped_share():
    from mptrain.report.metrics import RoundMetrics
    from mptrain.rl.metrics import rl_round_parts

    row = RoundMetrics(epoch=1, train_loss=1.0, test_loss=None, test_accuracy=None,
                       test_mse=None, samples_per_s=2000.0, epoch_s=2.5, train_samples=5_120,
                       steps=400, minor_faults=0,
                       extras={"env_steps": 5_120, "episodes": 60, "return_mean": 70.5,
                               "approx_kl": 0.0074, "clip_fraction": 0.083})
    assert rl_round_parts(row) == ["5,120 steps", "60 episodes", "return 70.5", "kl 0.0074",
                                   "clipped 8%", "2,000 steps/s", "2.50 s"]


@pytest.mark.timeout(120)
def test_one_process_acts_and_learns_alone_and_is_as_reproducible():
    settings = dict(workers=1, seed=3, steps=512, round_steps=256, envs_per_actor=2,
                    n_steps=64, batch_size=32, update_epochs=2, eval_episodes=1)
    once, again = fit("CartPole-v1", "ppo", **settings), fit("CartPole-v1", "ppo", **settings)
    assert curve(once) == curve(again) and same_network(once, again)
    # 4 updates of 1 x 2 x 64 transitions, 2 epochs of 4 minibatches each
    assert sum(row.extras["updates"] for row in once.rounds) == 4 * 2 * 4


def learner_of(**settings):
    """A learner (no processes) with one actor's segment of 2 x 16 transitions to learn."""
    from mptrain.rl.flat_adam import FlatAdam
    from mptrain.rl.nets import SeparateActorCritic
    from mptrain.rl.ppo import PPOProgram
    from mptrain.rl.ppo_rollout import SharedRollouts, VectorActor

    config = RLConfig(algo="ppo", workers=1, envs_per_actor=2, n_steps=16, batch_size=16,
                      update_epochs=4, **settings)
    torch.manual_seed(0)
    model = SeparateActorCritic(4, 2)
    actor = VectorActor("CartPole-v1", 2, torch.Generator().manual_seed(0), config.gamma,
                        config.gae_lambda)
    actor.reset([0, 1])
    rollouts = SharedRollouts.create(1, 16, 2, 4)
    rollouts.write(0, actor.collect(model, 16))
    learner = object.__new__(PPOProgram)
    learner.config, learner.model, learner.rollouts, learner.updates_done = \
        config, model, rollouts, 0
    learner.net = copy.deepcopy(model)
    learner.optimizer = FlatAdam(learner.net, lr=config.learning_rate)
    learner.shuffler = torch.Generator().manual_seed(0)
    return learner


def test_an_update_writes_the_learners_network_into_the_shared_one():
    learner = learner_of()
    before = copy.deepcopy(learner.model)
    learner.update()
    assert same_network(SimpleNamespace(model=learner.model), SimpleNamespace(model=learner.net))
    assert not same_network(SimpleNamespace(model=learner.model), SimpleNamespace(model=before))


def test_target_kl_stops_the_epochs_of_an_update():
    assert learner_of().update()["minibatches"] == 4 * 2       # 4 epochs of 32 / 16
    assert learner_of(target_kl=1e-12).update()["minibatches"] == 2   # the first epoch


def test_the_learning_rate_falls_linearly_to_zero_over_the_run():
    learner = learner_of(steps=320, lr=0.01)   # 10 updates of 32 transitions
    learner.updates_done = 4
    learner.update()
    assert learner.optimizer.lr == pytest.approx(0.01 * (1 - 4 / 10))
    fixed = learner_of(steps=320, lr=0.01, anneal_lr=False)
    fixed.updates_done = 4
    fixed.update()
    assert fixed.optimizer.lr == 0.01
