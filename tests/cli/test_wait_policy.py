"""The `mptrain` command makes OpenMP's threads wait passively unless the user said
otherwise (issue 43: spinning threads made a default run several times slower on a busy
machine); only fit()'s banner speaks of it, where threads spin by OpenMP's default."""

import os
import subprocess
import sys

import pytest


def banner(tmp_path, policy):
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    if policy is not None:
        env["OMP_WAIT_POLICY"] = policy
    done = subprocess.run([sys.executable, "-m", "mptrain", "run", "--data", "linreg",
                           "--epochs", "1", "--threads-per-worker", "2"],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=100)
    assert done.returncode == 0, done.stderr
    return " ".join(done.stdout.split())


@pytest.mark.timeout(120)
@pytest.mark.parametrize("policy", [None, "ACTIVE"])
def test_the_commands_banner_says_nothing_of_openmp(tmp_path, policy):
    # A line of OpenMP jargon on every run, that no user could act on (issue 57): the
    # command chose, or the user did.
    assert "OpenMP" not in banner(tmp_path, policy)


def test_only_threads_left_spinning_by_default_are_worth_a_line(monkeypatch):
    from mptrain.launch import openmp

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.setattr(openmp, "_chose_passive", False)
    assert openmp.wait_policy_line() == (
        "worker threads spin while they wait (OpenMP's default): on a machine busy with "
        "other work, set OMP_WAIT_POLICY=PASSIVE before importing torch, or use the mptrain "
        "command, which does")
    monkeypatch.setattr(openmp, "_chose_passive", True)
    assert openmp.wait_policy_line() is None


def test_the_command_chooses_before_torch_loads_openmp():
    # libgomp reads the variable once, as torch loads it.
    code = ("import os, sys\nos.environ.pop('OMP_WAIT_POLICY', None)\n"
            "os.environ.pop('GOMP_SPINCOUNT', None)\n"
            "from mptrain.cli import console\nfrom mptrain.launch import openmp\n"
            "assert 'torch' not in sys.modules\nopenmp.this_process_is_the_command()\n"
            "print(os.environ['OMP_WAIT_POLICY'], os.environ['GOMP_SPINCOUNT'])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.stdout.strip() == "PASSIVE 10000", done.stderr


def test_a_spin_count_of_the_users_leaves_both_variables_to_the_user(monkeypatch):
    from mptrain.launch import openmp

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.setenv("GOMP_SPINCOUNT", "0")
    monkeypatch.setattr(openmp, "_the_command", False)
    monkeypatch.setattr(openmp, "_chose_passive", False)
    openmp.this_process_is_the_command()
    assert "OMP_WAIT_POLICY" not in os.environ
    assert openmp.wait_policy_line() is None   # the user chose
