"""The command line of fedavg's workbench: flags, aliases, config file, refusals, --help."""

import json

import pytest

from mptrain.cli import main
from user_errors import fail

pytestmark = pytest.mark.timeout(90)

FAST = ["run", "--strategy", "fedavg", "--workers", "2", "--threads-per-worker", "1",
        "--rounds", "2", "--clients", "10", "--clients-per-round", "4", "--quiet"]


def test_help_groups_the_federated_flags(capsys):
    assert main(["run", "--help"]) == 0
    out = capsys.readouterr().out
    general, federated = out.split("Federated options (--strategy fedavg, fedbuff):")
    for flag in ("--server-optimizer, --server-opt", "--server-betas", "--scaffold",
                 "--dropout-rate", "--straggler-rate", "--dp-clip", "--dp-noise", "--dp-delta",
                 "--target-epsilon", "--accountant", "--client-eval-every", "--rounds INTEGER"):
        assert flag in federated and flag not in general, flag


def test_a_run_with_flags_and_a_config_file(tmp_path):
    config = tmp_path / "run.toml"
    config.write_text('server-betas = "0.8,0.95"\nserver-tau = 0.01\n')
    out = tmp_path / "out"
    assert main([*FAST, "--server-opt", "yogi", "--server-lr", "0.05", "--config", str(config),
                 "--sampling", "poisson", "--dp-clip", "1", "--dp-noise", "1",
                 "--dropout-rate", "0.2", "--client-eval-every", "1", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["server_optimizer"], summary["server_lr"]) == ("yogi", 0.05)
    assert summary["epsilon"] > 0 and summary["dp_delta"] == 1e-5
    rows = [json.loads(line) for line in (out / "metrics.jsonl").open()]
    assert all("epsilon" in r and "client_acc_mean" in r and "dropped" in r for r in rows)


@pytest.mark.parametrize("flags, needle", [
    (["--dp-noise", "1", "--dp-clip", "1"], "--dp-noise needs --sampling poisson"),
    (["--server-betas", "0.9,2"], "--server-betas must be two numbers"),
    (["--scaffold", "--momentum", "0.5"], "--scaffold needs plain client SGD"),
    (["--target-epsilon", "2"], "--target-epsilon is about differential privacy"),
])
def test_refusals_are_one_line(flags, needle, capsys):
    assert needle in fail([*FAST, *flags], capsys)


def test_other_strategies_refuse_workbench_flags(capsys):
    assert "--scaffold does nothing with --strategy sync" in \
        fail(["run", "--strategy", "sync", "--scaffold"], capsys)
