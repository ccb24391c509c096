import json
import sys

import pytest

from mptrain.cli import main


def test_without_gymnasium_one_line_and_exit_2(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "gymnasium", None)   # import gymnasium now fails
    with pytest.raises(SystemExit) as done:
        main(["rl", "--steps", "1000"])
    assert done.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["mptrain: error: reinforcement learning needs gymnasium: "
                   "pip install 'mptrain[rl]'"]


def test_bad_flag_is_one_line(capsys):
    pytest.importorskip("gymnasium")
    with pytest.raises(SystemExit) as done:
        main(["rl", "--workers", "0"])
    assert done.value.code == 2
    assert "--workers must be a positive integer" in capsys.readouterr().err


@pytest.mark.parametrize("flags, words", [
    (["--eval-every", "-1"], "--eval-every must be an integer >= 0, got -1"),
    (["--keep", "worst"], "'worst' is not one of 'best', 'final'"),
])
def test_evaluation_flag_mistakes_are_one_line(capsys, flags, words):
    pytest.importorskip("gymnasium")
    from user_errors import fail

    assert words in fail(["rl", *flags], capsys)


@pytest.mark.timeout(120)
def test_rl_command_writes_its_outputs(tmp_path, capsys):
    pytest.importorskip("gymnasium")
    assert main(["rl", "--algo", "a3c", "--workers", "2", "--steps", "4000",
                 "--round-steps", "2000", "--eval-episodes", "2", "--out",
                 str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "round 2/2" in out and "greedy" in out and "steps/s" in out
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["algo"] == "a3c" and summary["env_steps"] == 4000
    assert summary["eval_episodes"] == 2
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [row["env_steps"] for row in rows] == [2000, 4000]


@pytest.fixture
def captured_rl(monkeypatch):
    """Replace the RL run by a recorder of the request the command hands over."""
    import mptrain.rl.api

    calls = []

    def recorded(request):
        calls.append(request)
        return request.family.result(request.model, request.config)   # an empty run's

    monkeypatch.setattr(mptrain.rl.api, "run", recorded)
    return calls


def test_rl_takes_a_config_file_that_flags_override(tmp_path, captured_rl):
    pytest.importorskip("gymnasium")
    path = tmp_path / "rl.toml"
    path.write_text('algo = "dqn"\nsteps = 3000\n[run]\nround-steps = 1000\nlr = 0.002\n'
                    'out = "from-file"\nquiet = true\n')
    assert main(["rl", "--config", str(path), "--steps", "5000"]) == 0
    [request] = captured_rl
    config = request.config
    assert (config.algo, config.steps, config.round_steps, config.lr, config.quiet) == \
        ("dqn", 5000, 1000, 0.002, True)
    assert str(request.out) == "from-file" and request.quiet


def test_dqn_target_tau_travels_from_the_config_file_and_flags(tmp_path, captured_rl):
    pytest.importorskip("gymnasium")
    path = tmp_path / "rl.toml"
    path.write_text('algo = "dqn"\ntarget-tau = 0.01\ntarget-every = 1\n')
    assert main(["rl", "--config", str(path)]) == 0
    assert main(["rl", "--config", str(path), "--target-tau", "0.005"]) == 0
    assert [(r.config.target_tau, r.config.target_every) for r in captured_rl] == \
        [(0.01, 1), (0.005, 1)]


def test_dqn_return_steps_and_advantage_learning_travel_from_file_and_flags(tmp_path,
                                                                           captured_rl):
    pytest.importorskip("gymnasium")
    path = tmp_path / "rl.toml"
    path.write_text('algo = "dqn"\nreturn-steps = 3\nadvantage-learning = 0.5\n')
    assert main(["rl", "--config", str(path)]) == 0
    assert main(["rl", "--config", str(path), "--return-steps", "2",
                 "--advantage-learning", "0.9"]) == 0
    assert [(r.config.return_steps, r.config.advantage_learning) for r in captured_rl] == \
        [(3, 0.5), (2, 0.9)]


def test_dqn_dueling_travels_from_file_and_flags_into_the_network(tmp_path, captured_rl):
    pytest.importorskip("gymnasium")
    from mptrain.rl.nets import DuelingQNetwork, QNetwork

    path = tmp_path / "rl.toml"
    path.write_text('algo = "dqn"\ndueling = true\n')
    assert main(["rl", "--config", str(path)]) == 0
    assert main(["rl", "--config", str(path), "--no-dueling"]) == 0
    assert main(["rl", "--algo", "dqn", "--dueling"]) == 0
    assert [(r.config.dueling, type(r.model)) for r in captured_rl] == \
        [(True, DuelingQNetwork), (False, QNetwork), (True, DuelingQNetwork)]


@pytest.mark.parametrize("table", ["rl", "run"])
def test_rl_takes_its_settings_under_an_rl_table_too(tmp_path, captured_rl, table):
    pytest.importorskip("gymnasium")
    path = tmp_path / "rl.toml"
    path.write_text(f'[{table}]\nalgo = "ppo"\nsteps = 4096\nround-steps = 2048\n')
    assert main(["rl", "--config", str(path)]) == 0
    [request] = captured_rl
    assert (request.config.algo, request.config.steps) == ("ppo", 4096)


@pytest.mark.parametrize("text, words", [
    ("stepz = 3\n", "unknown key 'stepz' (did you mean 'steps'?); known keys:"),
    ('lr = "0.1"\n', "rl.toml: lr is a string ('0.1') where a number is expected"),
    ("epochs = 3\n", "unknown key 'epochs'"),
])
def test_rl_config_file_mistakes_are_one_line(tmp_path, capsys, text, words):
    pytest.importorskip("gymnasium")
    from user_errors import fail

    path = tmp_path / "rl.toml"
    path.write_text(text)
    assert words in fail(["rl", "--config", str(path)], capsys)
