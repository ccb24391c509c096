"""Mistakes a new user made (issue 43), each answered in one line that says what to do."""

import re

import pytest

from mptrain.launch.preflight import GUARD_HELP, NO_GUARD_HELP
from user_errors import fail

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("partition, suggestion", [
    ("dirichlt:0.5", "did you mean dirichlet:0.5?"),
    ("shard:2", "did you mean shards:2?"),
    ("iidd", "did you mean iid?"),
    ("dirichlt:make", "did you mean dirichlet?"),
])
def test_a_partition_typo_lists_the_built_ins_and_the_close_one(capsys, partition, suggestion):
    # It was taken for an import string: "cannot import module 'dirichlt'".
    err = fail(["run", "--strategy", "fedavg", "--partition", partition], capsys)
    assert f"unknown --partition {partition!r} ({suggestion})" in err
    assert "iid, dirichlet:ALPHA[:MIN], shards:K" in err and "cannot import" not in err


def test_a_partition_that_is_a_number_after_a_module_is_no_import_string(capsys):
    err = fail(["run", "--strategy", "fedavg", "--partition", "mine:0.5"], capsys)
    assert "unknown --partition 'mine:0.5'; choose iid" in err


@pytest.mark.parametrize("text", [GUARD_HELP, NO_GUARD_HELP])
def test_the_spawn_guard_message_reads_cleanly(text):
    # It read "...in every worker,. Put the training call under  if __name__ ...".
    assert ",." not in text and "  " not in text and " ." not in text
    assert '`if __name__ == "__main__":`' in text
    assert not re.search(r"[,;:]\s*[,;.]", text)


@pytest.mark.parametrize("argv, option", [
    (["run", "--out", ""], "--out"),            # wrote the outputs into the working folder
    (["run", "--resume", ""], "--resume"),      # trained from scratch instead of resuming
    (["run", "--data", " "], "--data"),         # trained on digits
    (["run", "--model", ""], "--model"),
    (["run", "--config", ""], "--config"),      # ran without the file
    (["run", "--logger", ""], "--logger"),
    (["rl", "--out", ""], "--out"),
    (["partitions", "--out", ""], "--out"),
    (["bench", "--out", ""], "--out"),
])
def test_an_empty_value_is_refused_not_taken_as_left_out(argv, option, capsys):
    # `--out "$RUN"` with RUN unset: each of these ran as if the option were not given.
    err = fail(argv, capsys)
    assert f"Invalid value for '{option}': it is empty" in err, err


@pytest.mark.parametrize("key", ["out", "data", "model", "data-dir"])
def test_an_empty_location_in_a_config_file_is_refused(tmp_path, key, capsys):
    config = tmp_path / "run.toml"
    config.write_text(f'{key} = ""\n')
    err = fail(["run", "--config", str(config)], capsys)
    assert f"config file {config}: {key} is empty" in err, err
