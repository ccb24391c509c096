"""Tests marked with one ``xdist_group`` run in one xdist worker (``xdist_groups``)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("xdist")

TESTS = Path(__file__).resolve().parent

GROUPED_SUITE = '''
import os
import pytest

TOGETHER = pytest.mark.xdist_group("together")


def note(name):
    with open(os.path.join(os.environ["MARK_DIR"], name), "w") as mark:
        mark.write(os.environ["PYTEST_XDIST_WORKER"])


@TOGETHER
@pytest.mark.parametrize("case", ["a", "b", "c"])
def test_grouped(case):
    note("grouped-" + case)


@pytest.mark.parametrize("case", range(6))
def test_free(case):
    note(f"free-{case}")
'''


def test_tests_of_one_group_run_in_one_worker(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(
        "from xdist_groups import name_groups\n\n\n"
        "def pytest_collection_modifyitems(config, items):\n"
        "    name_groups(config, items)\n")
    (suite / "test_grouped_suite.py").write_text(GROUPED_SUITE)
    env = dict(os.environ, MARK_DIR=str(tmp_path), PYTHONPATH=os.pathsep.join(
        [str(TESTS), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-c", os.devnull, "--rootdir", str(suite), "-n", "2",
                           "--dist", "loadgroup", str(suite)],
                          cwd=suite, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    workers = {path.name: path.read_text() for path in tmp_path.glob("*-*")}
    assert len(workers) == 9, workers
    assert len({workers[f"grouped-{case}"] for case in "abc"}) == 1, workers
