"""How OpenMP's wait policy changes a default `mptrain run` beside other load (issue 43).

Runs `mptrain run --quiet [ARGS]` with OMP_WAIT_POLICY=ACTIVE (GNU OpenMP's spinning, what
torch did before mptrain chose), PASSIVE, and unset (mptrain's own choice), interleaved, with
--busy processes of `while 1: pass` beside them, and prints the wall times and their medians
as JSON. Figures from a machine shared with other work are indicative only.

    python benchmarks/omp_wait_policy.py --busy 2 --repeats 3 -- --epochs 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

#: "unset": the variable left out, so the `mptrain` command chooses (launch/openmp.py).
POLICIES = ("ACTIVE", "PASSIVE", "unset")


def busy(count: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(count)]


def timed_run(policy: str, args: list[str]) -> float:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if policy != "unset":
        env["OMP_WAIT_POLICY"] = policy
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "mptrain", "run", "--quiet", *args], env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"mptrain run failed: {done.stderr.strip()}")
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--busy", type=int, default=2, help="busy processes beside the runs")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("args", nargs="*", help="`mptrain run` options (after --)")
    options = parser.parse_args()
    import torch

    load = busy(options.busy)
    times: dict[str, list[float]] = {policy: [] for policy in POLICIES}
    try:
        for _ in range(options.repeats):
            for policy in POLICIES:
                times[policy].append(round(timed_run(policy, options.args), 2))
    finally:
        for process in load:
            process.kill()
            process.wait()
    print(json.dumps({"busy_processes": options.busy, "run_args": options.args,
                      "torch": torch.__version__, "logical_cpus": os.cpu_count(),
                      "loadavg_after": os.getloadavg(), "wall_s": times,
                      "median_s": {k: statistics.median(v) for k, v in times.items()}},
                     indent=1))


if __name__ == "__main__":
    main()
