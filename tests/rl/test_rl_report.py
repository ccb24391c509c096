"""An RL run's summary.json and closing lines, from its rows (no processes, no Gymnasium)."""

from types import SimpleNamespace

from mptrain.rl.config import RLConfig
from mptrain.rl.report import build_summary, result_lines

PLAN = SimpleNamespace(workers=2, threads=1, start_method="fork", cores=2)


def row(index, eval_return=None, elapsed=1.0):
    return {"epoch": index, "epoch_s": 2.0, "train_samples": 1_000, "env_steps": 1_000 * index,
            "elapsed_s": elapsed * index, "eval_return": eval_return,
            "eval_return_std": 5.0 if eval_return is not None else None,
            "eval_episodes": 4 if eval_return is not None else 0}


def test_the_summary_takes_the_last_evaluation_and_the_first_round_at_the_target():
    config = RLConfig(steps=3_000, round_steps=1_000, target_return=100.0)
    rows = [row(1, 20.0), row(2, 120.0), row(3, 150.0)]
    summary = build_summary(config, PLAN, rows, wall_s=9.0)
    assert (summary["algo"], summary["workers"], summary["rounds_done"]) == ("a3c", 2, 3)
    assert summary["env_steps"] == 3_000 and summary["env_steps_per_s"] == 3_000 / 6.0
    assert (summary["eval_return"], summary["eval_episodes"]) == (150.0, 4)
    assert summary["target_reached_at_round"] == 2
    assert summary["target_reached_at_steps"] == 2_000
    lines = result_lines(summary, None)
    assert lines[0] == "[bold]done[/bold]: greedy return 150.0 ± 5.0 over 4 episodes · " \
                       "3,000 env steps · 9.0 s wall · 500 env steps/s"
    assert lines[1] == "target return 100 reached at 2,000 steps (2.0 s)"


def test_a_run_without_evaluation_or_target_says_so():
    summary = build_summary(RLConfig(steps=2_000, round_steps=1_000), PLAN,
                            [row(1), row(2)], wall_s=4.0)
    assert summary["eval_return"] is None and "target_return" not in summary
    assert result_lines(summary, None)[0].startswith(
        "[bold]done[/bold]: no evaluation completed")
