"""How fast mptrain notices each kind of fault, what it exits with, and what it leaves behind.

    python benchmarks/faults.py [--workers 2] [--json auto]

Every fault is injected once into a real ``mptrain run`` (small synthetic data, ``--workers
2``): a worker raises, exits with code 3, is SIGKILLed, segfaults, hangs (``--worker-timeout
3``) or deadlocks in native code; the parent gets SIGINT, SIGTERM or SIGKILL.

- message s: from the fault to the first byte the parent writes on stderr.
- detect s: from the fault (the ``time.time()`` stamp the misbehaving worker writes just
  before it misbehaves, or the moment the signal is sent) to the parent's exit; for a
  SIGKILLed parent, until its last worker is gone.
- alive / shm: the run's processes still alive and the new /dev/shm entries, at that moment
  and again 5 s later (torch_shm_manager, under ``file_system``, outlives the run by a moment
  and then unlinks its segments).

The model factory is the one of ``tests/test_faults.py``, copied. Figures only; nothing is
asserted.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from common import machine_info, result_path, write_json

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from run_watch import poll, shm_entries  # noqa: E402

SETTLE_S = 5.0
# The same misbehaving factories as the fault tests use.
FACTORY_FILE = Path(__file__).resolve().parents[1] / "tests" / "faulty_workload.py"

# name, strategy, extra flags, factory environment, how the fault is caused
CASES = [
    ("worker raises", "sync", [], {"FAULT": "raise"}, "worker"),
    ("worker exit(3)", "hogwild", [], {"FAULT": "exit3"}, "worker"),
    ("worker SIGKILL", "hogwild", [], {"FAULT": "sigkill"}, "worker"),
    ("worker SIGSEGV", "sync", [], {"FAULT": "sigsegv"}, "worker"),
    ("worker hangs (timeout 3 s)", "sync", ["--worker-timeout", "3"], {"FAULT": "hang"},
     "worker"),
    ("worker SIGKILL, file_system", "sync", ["--sharing-strategy", "file_system"],
     {"FAULT": "sigkill"}, "worker"),
    ("parent SIGINT", "hogwild", [], {}, signal.SIGINT),
    ("parent SIGTERM", "sync", [], {}, signal.SIGTERM),
    ("parent SIGKILL", "hogwild", [], {}, signal.SIGKILL),
    ("parent SIGKILL, file_system", "sync", ["--sharing-strategy", "file_system"], {},
     signal.SIGKILL),
    ("SIGINT, worker stuck in native code", "sync", [], {"FAULT": "native-hang"},
     signal.SIGINT),
]


def markers(folder: Path, prefix: str) -> dict[int, float]:
    found = {}
    for path in folder.glob(f"{prefix}-*"):
        suffix = path.name[len(prefix) + 1:]
        if suffix.isdigit():
            found[int(suffix)] = float(path.read_text())
    return found


def alive(tree: dict) -> list[int]:
    pids = []
    for pid, process in tree.items():
        try:
            if process.is_running() and (process.status() != psutil.STATUS_ZOMBIE
                                         or process.ppid() == os.getpid()):
                pids.append(pid)
        except psutil.NoSuchProcess:
            pass
    return pids


def wait_noting_first_output(process, stderr: Path, timeout: float) -> float | None:
    """Wait for ``process`` to exit; return when its first stderr byte appeared (the parent
    reports within milliseconds, then spends a while in interpreter teardown)."""
    deadline, first = time.monotonic() + timeout, None
    while process.poll() is None:
        if first is None and stderr.stat().st_size > 0:
            first = time.time()
        if time.monotonic() > deadline:
            raise subprocess.TimeoutExpired(process.args, timeout)
        time.sleep(0.005)
    if first is None and stderr.stat().st_size > 0:
        first = time.time()
    return first


def run_case(name, strategy, extra, fault_env, cause, workers) -> dict:
    with tempfile.TemporaryDirectory(prefix="mptrain-faults-") as tmp:
        folder = Path(tmp)
        factory = folder / "faulty.py"
        factory.write_text(FACTORY_FILE.read_text())
        gate = folder / "gate"
        env = dict(os.environ, FAULT_DIR=str(folder), FAULT_GATE=str(gate), STEP_DELAY="0.01",
                   **fault_env)
        command = [sys.executable, "-m", "mptrain", "run", "--data", f"{factory}:make_data",
                   "--model", f"{factory}:make_model", "--strategy", strategy, "--workers",
                   str(workers), "--epochs", "50", "--quiet", *extra]
        shm_before = shm_entries()
        with open(folder / "stderr.txt", "w") as err:
            process = subprocess.Popen(command, cwd=folder, env=env, stdout=subprocess.DEVNULL,
                                       stderr=err, start_new_session=True,
                                       preexec_fn=lambda: signal.signal(signal.SIGINT,
                                                                        signal.SIG_DFL))
        try:
            poll(lambda: len(markers(folder, "started")) >= workers
                 or process.poll() is not None, 120)
            tree = {process.pid: psutil.Process(process.pid)}
            for child in psutil.Process(process.pid).children(recursive=True):
                tree[child.pid] = child
            gate.touch()
            if fault_env:
                poll(lambda: markers(folder, "fault") or process.poll() is not None, 60)
            if isinstance(cause, signal.Signals):
                fault_at = time.time()
                os.kill(process.pid, cause)
            else:
                fault_at = min(markers(folder, "fault").values(), default=float("nan"))
            message_at = wait_noting_first_output(process, folder / "stderr.txt", 120)
            exited_at = time.time()
            if cause == signal.SIGKILL:  # nobody reports: time until the workers are gone
                workers_of_run = {pid: tree[pid] for pid in markers(folder, "started")
                                  if pid in tree}
                poll(lambda: not alive(workers_of_run), SETTLE_S)
                exited_at = time.time()
            live_at_exit = alive(tree)
            shm_at_exit = shm_entries() - shm_before
            poll(lambda: not alive(tree) and not (shm_entries() - shm_before), SETTLE_S)
            stderr = (folder / "stderr.txt").read_text()
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        return {"fault": name, "strategy": strategy, "workers": workers, "flags": extra,
                "message_s": None if message_at is None else message_at - fault_at,
                "detect_s": exited_at - fault_at, "exit_code": process.returncode,
                "live_pids_at_exit": len(live_at_exit),
                "new_shm_at_exit": len(shm_at_exit),
                "new_shm_names_at_exit": sorted(shm_at_exit)[:10],
                "live_pids_after_settle": len(alive(tree)),
                "new_shm_after_settle": len(shm_entries() - shm_before),
                "message": next((line for line in stderr.splitlines()
                                 if line.startswith("mptrain:")), stderr.strip()[:200])
                or "(no message: the parent was SIGKILLed)"}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", default="auto",
                        help="where the figures go (auto: "
                             "benchmarks/results/faults-DATE.json)")
    args = parser.parse_args()
    args.json = result_path("faults", args.json)
    rows = []
    header = (f"{'fault':36} {'strategy':8} {'message s':>9} {'detect s':>8} {'exit':>5} "
              f"{'alive@exit':>10} "
              f"{'shm@exit':>8} {'alive+5s':>8} {'shm+5s':>6}")
    print(header)
    print("-" * len(header))
    for case in CASES:
        row = run_case(*case, workers=args.workers)
        rows.append(row)
        message = "-" if row["message_s"] is None else f"{row['message_s']:.2f}"
        print(f"{row['fault']:36} {row['strategy']:8} {message:>9} {row['detect_s']:8.2f} "
              f"{row['exit_code']:5d} {row['live_pids_at_exit']:10d} {row['new_shm_at_exit']:8d} "
              f"{row['live_pids_after_settle']:8d} {row['new_shm_after_settle']:6d}", flush=True)
    print("\nmessage: fault -> first stderr output; detect: fault -> parent exit (SIGKILLed "
          "parent: -> workers gone)\nalive: processes of the run still alive; shm: new "
          "/dev/shm entries; at that moment and 5 s later")
    for row in rows:
        print(f"  {row['fault']}: {row['message'][:150]}")
    write_json(args.json, {"machine": machine_info(), "workers": args.workers,
                           "step_delay_s": 0.01, "worker_threads": 1, "rows": rows})
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
