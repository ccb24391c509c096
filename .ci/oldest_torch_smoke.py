"""A tiny run of every strategy and RL algorithm, each a command of its own, under the torch
of the Python that runs this file: CI runs it under the oldest torch pyproject.toml accepts
(``.ci/oldest_torch.sh``), where an API or kernel that torch lacks would show. Not part of
the test suite, whose tests may use the newest torch's features.

Prints a line per run (its time; the last lines of its output when it failed) and a closing
``smoke: N passed, N failed``; exits 1 when any failed.
"""

from __future__ import annotations

import os
import platform
import signal
import subprocess
import sys
import tempfile
import time

#: Per command; each takes 5-20 s on the 2-core CI machine, loaded.
TIMEOUT_S = 240

MPTRAIN = [sys.executable, "-m", "mptrain"]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc-per-node", "2", "-m", "mptrain"]
FEDAVG = ["run", "--strategy", "fedavg", "--workers", "2", "--rounds", "2"]


def cases(out: str, gpus: bool) -> list[tuple[str, list[str], int, str]]:
    """(name, command, exit code expected, text its output must hold); ``out``: a folder
    for outputs, ``gpus``: whether CUDA devices are visible."""
    run = MPTRAIN + ["run", "--epochs", "1"]
    return [
        ("single", run, 0, "done:"),
        ("hogwild, shared Adam state", run + ["--strategy", "hogwild", "--workers", "2",
                                              "--optimizer", "adam",
                                              "--share-optimizer-state"], 0, "done:"),
        ("sync, checkpointed", run + ["--strategy", "sync", "--workers", "2", "--out",
                                      f"{out}/sync", "--checkpoint-every", "1"], 0, "done:"),
        ("sync, resumed", MPTRAIN + ["run", "--resume", f"{out}/sync", "--epochs", "2"], 0,
         "done:"),
        ("ddp (shared memory)", run + ["--strategy", "ddp", "--workers", "2"], 0, "done:"),
        ("ddp (gloo), bf16", run + ["--strategy", "ddp", "--workers", "2", "--ddp-backend",
                                    "gloo", "--precision", "bf16"], 0, "done:"),
        ("ddp under torchrun", TORCHRUN + ["run", "--strategy", "ddp", "--epochs", "1"], 0,
         "done:"),
        ("fedavg", MPTRAIN + FEDAVG, 0, "done:"),
        ("fedavg, vectorized clients", MPTRAIN + FEDAVG + ["--vectorize-clients", "on"], 0,
         "done:"),
        ("fedavg, median against sign flippers",
         MPTRAIN + FEDAVG + ["--aggregator", "median", "--attack", "sign-flip",
                             "--malicious-fraction", "0.2"], 0, "done:"),
        ("fedavg, DP-FedAvg", MPTRAIN + FEDAVG + ["--dp-noise", "0.5", "--dp-clip", "1",
                                                 "--sampling", "poisson"], 0, "done:"),
        # nn.DataParallel needs GPUs: without them, what is checked is its refusal.
        ("dp", run + ["--strategy", "dp"], 0, "done:") if gpus else
        ("dp (GPUs only): refused in one line", run + ["--strategy", "dp"], 2,
         "mptrain: error: strategy 'dp'"),
        *[(f"rl {algo}", MPTRAIN + ["rl", "--algo", algo, "--workers", "2", "--steps", "2000"],
           0, "done:") for algo in ("a3c", "dqn", "ppo")],
    ]


def run_case(name: str, command: list[str], expected_rc: int, expected_text: str) -> bool:
    start = time.monotonic()
    # A session of its own: a command past its time is killed with every process it
    # started (workers, torchrun's ranks), not only the first.
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = process.communicate(timeout=TIMEOUT_S)
        rc = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, rc = process.communicate()[0], None
    took = time.monotonic() - start
    passed = rc == expected_rc and expected_text in output
    print(f"{'ok  ' if passed else 'FAIL'} {name} ({took:.1f} s)", flush=True)
    if not passed:
        said = f"timed out after {TIMEOUT_S} s" if rc is None else f"exit {rc}"
        print(f"     {' '.join(command)}\n     {said}, expected exit {expected_rc} and "
              f"{expected_text!r}; its last lines:", flush=True)
        for line in output.splitlines()[-15:]:
            print(f"     | {line}", flush=True)
    return passed


def main() -> int:
    import numpy
    import torch
    print(f"smoke test under torch {torch.__version__}, numpy {numpy.__version__}, "
          f"Python {platform.python_version()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="oldest-torch-smoke-") as out:
        results = [run_case(*case) for case in cases(out, torch.cuda.is_available())]
    passed = sum(results)
    print(f"smoke: {passed} passed, {len(results) - passed} failed")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    sys.exit(main())
