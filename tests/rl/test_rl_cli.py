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
