"""The stop-signal chaos tests, again and again, beside busy processes on every core.

    python benchmarks/chaos_loaded.py [--iterations 10] [--budget-s 480] [--hogs N]
                                      [--started-as terminal|background] [--json none]

Each iteration runs the tests that send a live run its stop signal (SIGINT, SIGHUP) in a
fresh pytest (``-n 0``), while ``--hogs`` processes (default: one per usable core) spin
``while True: pass``; it prints pass/fail counts per test. ``--started-as background``
starts each pytest the way ``nohup pytest ... &`` from a script does -- SIGINT and SIGHUP
ignored, which every child inherits -- to check that the suite's runs still take their
stop signals as in a terminal (issue 57: the three tests below failed exactly so).

Bounded: no new iteration starts once ``--budget-s`` has passed, and each pytest is killed
after ``--timeout-s``; the hogs are killed in a ``finally``, whatever happens. The machine is
meant to be loaded, so nothing here is a timing: only how many runs lost a stop.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections import Counter
from pathlib import Path

from common import REPO, machine_info, result_path, write_json

TESTS = [
    "tests/launch/test_chaos_sighup.py",
    "tests/launch/test_chaos_stop_message.py",
    "tests/launch/test_stop_windows.py",
]
HOG = "while True: pass"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--budget-s", type=float, default=480.0,
                        help="start no iteration after this many seconds")
    parser.add_argument("--timeout-s", type=float, default=300.0, help="per pytest run")
    parser.add_argument("--hogs", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--started-as", choices=("terminal", "background"),
                        default="terminal")
    parser.add_argument("--json", default="none", help="PATH, auto or none")
    args = parser.parse_args()

    counts: dict[str, Counter] = {}
    started, iterations = time.monotonic(), 0
    hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(args.hogs)]
    try:
        while iterations < args.iterations and time.monotonic() - started < args.budget_s:
            for test, outcome in run_once(args.timeout_s, args.started_as).items():
                counts.setdefault(test, Counter())[outcome] += 1
            iterations += 1
            total = sum(counts.values(), Counter())
            print(f"iteration {iterations}: {total['passed']} passed, {total['failed']} "
                  "failed so far", flush=True)
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait()

    print(f"\n{iterations} iterations beside {args.hogs} busy processes, started as "
          f"{args.started_as}, {time.monotonic() - started:.0f} s")
    for test, outcome in sorted(counts.items()):
        print(f"  {outcome['passed']:3d} passed {outcome['failed']:3d} failed  {test}")
    path = result_path("chaos-loaded", args.json)
    if path is not None:
        write_json(path, {"machine": machine_info(), "iterations": iterations,
                          "hogs": args.hogs, "started_as": args.started_as,
                          "counts": {t: dict(c) for t, c in counts.items()}})
        print(f"wrote {path}")


def run_once(timeout_s: float, started_as: str) -> dict[str, str]:
    """Each test's outcome ("passed", "failed") in one pytest run of ``TESTS``."""
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "report.xml"
        tests = [test for test in TESTS if (REPO / test).is_file()]
        command = [sys.executable, "-m", "pytest", *tests, "-q", "-n", "0",
                   "-p", "no:cacheprovider", f"--junitxml={report}"]
        env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
        pytest = subprocess.Popen(
            command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=_as_a_background_job if started_as == "background" else None,
            start_new_session=True)
        try:
            pytest.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return {"(pytest timed out)": "failed"}
        finally:   # pytest and every run it started: its own session, its own group
            if pytest.poll() is None:
                os.killpg(pytest.pid, signal.SIGKILL)
                pytest.wait()
        if not report.is_file():
            return {"(no report)": "failed"}
        return {f"{case.get('classname')}::{case.get('name')}":
                "failed" if case.find("failure") is not None or case.find("error") is not None
                else "passed"
                for case in ElementTree.parse(report).iter("testcase")
                if case.find("skipped") is None}


def _as_a_background_job() -> None:
    """What ``nohup CMD &`` in a script gives CMD: SIGHUP (nohup) and SIGINT (a background
    job of a shell without job control) ignored, and inherited by every child."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


if __name__ == "__main__":
    main()
