"""Shared helpers of the benchmark scripts: run a command while sampling the memory of its
whole process tree, medians, machine facts. Benchmarks print figures and write JSON; they
never assert on time."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from mptrain.bench.memory import TreeMemorySampler  # noqa: E402  (one sampler for both)

REPO = Path(__file__).resolve().parents[1]
DEFAULT_MNIST = REPO.parent / "shared" / "data" / "mnist"


def mnist_dir(argument: str | None) -> Path:
    path = Path(argument or os.environ.get("MPTRAIN_MNIST_DIR") or DEFAULT_MNIST)
    if not path.is_dir():
        sys.exit(f"MNIST folder {path} not found; pass --data-dir or set MPTRAIN_MNIST_DIR")
    return path


def machine_info() -> dict:
    import torch

    return {"date": time.strftime("%Y-%m-%d %H:%M"), "torch": torch.__version__,
            "python": platform.python_version(), "usable_cores": len(os.sched_getaffinity(0)),
            "logical_cpus": os.cpu_count(), "memory_bytes": psutil.virtual_memory().total,
            "platform": platform.platform()}


def run_measured(command: list[str], timeout_s: float = 600, env: dict | None = None,
                 sample_memory: bool = True) -> dict:
    """Run ``command``; return wall seconds, exit code, output and peak tree memory.

    Sampling PSS walks the page tables of every process of the tree and takes their memory
    locks, which slows the run being measured: throughput runs pass ``sample_memory=False``.
    """
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, env={**os.environ, **(env or {})})
    sampler = TreeMemorySampler(process.pid) if sample_memory else None
    if sampler is not None:
        sampler.start()
    try:
        output, _ = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
    if sampler is not None:
        sampler.stop()
    return {"wall_s": time.monotonic() - started, "returncode": process.returncode,
            "output": output, "peak_rss_bytes": sampler.peak_rss if sampler else None,
            "peak_pss_bytes": sampler.peak_pss if sampler else None}


def steal_seconds() -> float | None:
    """CPU time the hypervisor gave to other guests, all CPUs together, since boot (Linux
    ``/proc/stat``); None elsewhere. Its growth during a cell says how much of the cell's
    time the machine was not ours: a slow cell with high steal is the host, not mptrain."""
    try:
        with open("/proc/stat") as stat:
            fields = stat.readline().split()
        return int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def summarize(values: list[float]) -> dict:
    values = [v for v in values if v is not None]
    if not values:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "n": len(values)}


RESULTS = REPO / "benchmarks" / "results"


def result_path(what: str, json_arg: str | None = "auto") -> Path | None:
    """Where a script writes its figures: ``--json PATH`` as given, or for ``--json auto``
    ``benchmarks/results/<what>-<YYYY-MM-DD>.json``, named by what it measured and the day
    (UTC); a second sitting on the same day adds the time, ``-HHMM``. None (``--json
    none``): no file."""
    if json_arg is None or json_arg.lower() == "none":
        return None
    if json_arg != "auto":
        return Path(json_arg)
    now = time.gmtime()
    path = RESULTS / f"{what}-{time.strftime('%Y-%m-%d', now)}.json"
    if path.exists():
        path = RESULTS / f"{what}-{time.strftime('%Y-%m-%d-%H%M', now)}.json"
    return path


def write_json(path: str | Path, data) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_suffix(path.suffix + ".tmp")
    temp.write_text(json.dumps(data, indent=2) + "\n")
    temp.replace(path)


def kept_run(cache: Path | None, name: str, run, cached_only: bool = False,
             usable=None) -> dict:
    """``run()``'s result, or the one kept as ``cache/name.json`` by an earlier sitting of
    the same setting (written atomically; a failed run is run again): a table of many long
    runs fills over several sittings. With ``cached_only`` a run not kept is not run: it
    is marked missing. ``usable(kept)``, when given, says whether a kept run answers this
    sitting's question (a run stopped at a lower target does not); one that does not is
    run again."""
    if cache is None:
        return run()
    path = cache / (name.replace(":", "-").replace(",", "-") + ".json")
    if path.exists():
        try:
            found = json.loads(path.read_text())
        except ValueError:
            found = None
        if isinstance(found, dict) and found.get("ok") and (usable is None or usable(found)):
            return found
    if cached_only:
        return {"ok": False, "missing": True, "error": "not run yet"}
    result = run()
    if result["ok"]:
        write_json(path, result)
    return result
