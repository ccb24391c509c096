"""`mptrain partitions` in-process: the table, the PNG, and bad input as one line, exit 2."""

import pytest

from mptrain.cli import main
from user_errors import fail

pytestmark = pytest.mark.timeout(60)


def test_default_is_iid_over_the_clients_run_takes_for_digits(capsys):
    assert main(["partitions"]) == 0
    out = capsys.readouterr().out
    assert "samples per client" in out and "distinct labels per client" in out
    assert "data digits" in out and "20 clients" in out and "partition iid" in out
    row = next(line for line in out.splitlines() if "samples per client" in line)
    assert [cell.strip() for cell in row.split("│")[2:5]] == ["71", "72", "72"]  # 1,438 / 20


def test_the_default_clients_are_those_of_mptrain_run_for_every_data_set(capsys):
    # 100 clients of linreg's 80 points was refused: run takes 8.
    assert main(["partitions", "--data", "linreg"]) == 0
    assert "8 clients" in capsys.readouterr().out


def test_shards_show_at_most_two_labels_and_out_writes_a_png(tmp_path, capsys):
    out_dir = tmp_path / "figures"
    assert main(["partitions", "--clients", "20", "--partition", "shards:2", "--seed", "3",
                 "--out", str(out_dir)]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "distinct labels" in line)
    assert int(row.split("│")[4]) <= 4  # digits' classes are not multiples of the shard size
    png = out_dir / "partitions.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"wrote {png}" in out
    assert [p.name for p in out_dir.iterdir()] == ["partitions.png"]  # no temp files left


def test_regression_data_shows_sizes_only(tmp_path, capsys):
    assert main(["partitions", "--data", "linreg", "--clients", "8", "--out",
                 str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "samples per client" in out and "distinct labels" not in out
    assert (tmp_path / "partitions.png").is_file()


def test_help_explains_the_partition_syntax(capsys):
    assert main(["partitions", "--help"]) == 0
    out = capsys.readouterr().out
    for word in ("iid", "dirichlet:ALPHA", "dirichlet:ALPHA:MIN", "shards:K",
                 "path/file.py:function", "function(targets, clients, seed)"):
        assert word in out


@pytest.mark.parametrize("argv, message", [
    (["--partition", "random"], "unknown --partition 'random'"),
    (["--partition", "dirichlet:-1"], "ALPHA must be a number > 0"),
    (["--clients", "0"], "--clients must be a whole number >= 1"),
    (["--clients", "5000"], "more than the 1438 training samples"),
    (["--data", "linreg", "--clients", "4", "--partition", "shards:2"], "needs class labels"),
    (["--clients", "abc"], "'abc' is not a valid integer"),
    # It printed a partition and "train on it: mptrain run ... --seed -1", which run refuses.
    (["--seed", "-1"], "Invalid value for '--seed'"),
    (["--seed", str(2**63)], "Invalid value for '--seed'"),
])
def test_bad_input_is_one_line_and_exit_2(argv, message, capsys):
    assert message in fail(["partitions", *argv], capsys)


def test_bad_spec_is_refused_before_out_is_created(tmp_path, capsys):
    fail(["partitions", "--partition", "shards", "--out", str(tmp_path / "never")], capsys)
    assert not (tmp_path / "never").exists()


def test_help_lists_the_workbench_with_flags_that_run_takes(capsys):
    import re

    from mptrain.cli.run import run

    assert main(["partitions", "--help"]) == 0
    out = capsys.readouterr().out
    named = set(re.findall(r"(--[a-z][a-z-]+)", out.split("Train on them:")[1]
                           .split("Options:")[0]))
    run_flags = {opt for param in run.params for opt in param.opts}
    assert {"--scaffold", "--server-optimizer", "--dp-clip", "--dp-noise", "--target-epsilon",
            "--dropout-rate", "--straggler-rate", "--client-eval-every"} <= named
    assert named <= run_flags, named - run_flags


def test_output_ends_with_the_run_command_for_this_partition(capsys):
    assert main(["partitions", "--clients", "12", "--partition", "dirichlet:0.5",
                 "--seed", "4"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == ("train on it: mptrain run --strategy fedavg --data digits --clients 12 "
                    "--partition dirichlet:0.5 --seed 4")
