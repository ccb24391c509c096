from mptrain.report.console import format_round_line
from mptrain.rl.a3c import A3CStrategy
from mptrain.rl.config import RLConfig
from mptrain.report.metrics import RoundMetrics


def test_rl_round_line_shows_steps_episodes_and_returns():
    row = RoundMetrics(epoch=2, train_loss=1.0, test_loss=None, test_accuracy=None,
                       test_mse=None, samples_per_s=5000.0, epoch_s=2.0, train_samples=10_000,
                       steps=10, minor_faults=0,
                       extras={"env_steps": 20_000, "episodes": 7, "return_mean": 55.25,
                               "eval_return": 500.0, "epsilon": 0.05})
    line = format_round_line(row, 10, "round", A3CStrategy(RLConfig()).round_line(row))
    assert line.startswith("round  2/10  ")
    assert line.split("  ")[2:] == ["20,000 steps", "7 episodes", "return 55.2",
                                "greedy 500.0", "eps 0.05", "5,000 steps/s", "2.00 s"]
