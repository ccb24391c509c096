"""What this machine offers a multi-process training run, gathered as plain data.

``mptrain devices`` shows this report so that a user can pick worker counts, threads, a
sharing strategy and a start method before launching, and so that a bug report carries the
facts that usually decide multi-process failures (cores actually usable, ``/dev/shm`` size,
open-file limit). Collection returns plain dicts (``--json`` dumps them as they are);
:func:`format_device_report` is the only part that knows about presentation.
"""

import json
import multiprocessing
import os
import resource
import subprocess
import sys

import psutil
import torch
import torch.multiprocessing
from rich.markup import escape
from rich.table import Table

from .report.words import human_bytes

SHM_PATH = "/dev/shm"
CUDA_QUERY_TIMEOUT_S = 60

# Run in a child interpreter: initialising CUDA there leaves the calling process free to fork
# workers later (a forked child cannot use CUDA once its parent has initialised it).
_CUDA_QUERY = """
import json, torch
devices = []
for i in range(torch.cuda.device_count()):
    props = torch.cuda.get_device_properties(i)
    free, total = torch.cuda.mem_get_info(i)
    devices.append({"index": i, "name": props.name, "capability": f"{props.major}.{props.minor}",
                    "total_bytes": int(total), "free_bytes": int(free)})
print(json.dumps({"available": torch.cuda.is_available(), "devices": devices}))
"""


def collect_device_report():
    """Gather CPUs, memory, shared memory, limits, torch settings and CUDA devices.

    Safe to call before forking workers: CUDA is never initialised in this process.
    """
    return {
        "cpus": _cpus(),
        "memory": _memory(),
        "shm": _shm(),
        "open_files": _open_files(),
        "torch": {
            "version": torch.__version__,
            "num_threads": torch.get_num_threads(),
            "num_interop_threads": torch.get_num_interop_threads(),
        },
        "sharing": {
            "available": sorted(torch.multiprocessing.get_all_sharing_strategies()),
            "current": torch.multiprocessing.get_sharing_strategy(),
        },
        "start_methods": {
            "available": multiprocessing.get_all_start_methods(),
            "default": multiprocessing.get_start_method(allow_none=True) or _platform_start_method(),
        },
        "cuda": _cuda(),
    }


def _cpus():
    # Containers and taskset often allow fewer cores than the machine has; workers and
    # threads should be sized from the usable count, not os.cpu_count().
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not available on macOS / Windows
        usable = os.cpu_count()
    return {"logical": os.cpu_count(), "usable": usable, "physical": psutil.cpu_count(logical=False) or None}


def _memory():
    vm = psutil.virtual_memory()
    return {"total_bytes": vm.total, "available_bytes": vm.available}


def _shm():
    # Shared tensors under the file_descriptor / file_system strategies live here; Docker's
    # 64 MiB default is a common cause of "bus error" in workers.
    try:
        st = os.statvfs(SHM_PATH)
    except (FileNotFoundError, AttributeError):
        return {"path": SHM_PATH, "total_bytes": None, "free_bytes": None}
    return {"path": SHM_PATH, "total_bytes": st.f_blocks * st.f_frsize, "free_bytes": st.f_bavail * st.f_frsize}


def _open_files():
    # The file_descriptor sharing strategy keeps one descriptor per shared tensor, so a low
    # soft limit shows up as "Too many open files" in workers.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    unlimited = resource.RLIM_INFINITY
    return {"soft": None if soft == unlimited else soft, "hard": None if hard == unlimited else hard}


def _platform_start_method():
    """The start method Python would pick, read without fixing it.

    ``get_start_method()`` without ``allow_none`` would set the default for good, so a later
    ``set_start_method`` by the launcher would fail; read the default context's choice instead.
    """
    default = getattr(multiprocessing.context, "_default_context", None)
    concrete = getattr(default, "_default_context", None)
    return getattr(concrete, "_name", None)


def _cuda():
    # device_count() asks NVML and does not initialise CUDA; torch.cuda.is_available() may call
    # cudaGetDeviceCount (which does cuInit) and so is only asked in the child process.
    count = torch.cuda.device_count()
    report = {"available": False, "device_count": count, "devices": [], "error": None}
    if count == 0:
        return report
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CUDA_QUERY],
            capture_output=True, text=True, timeout=CUDA_QUERY_TIMEOUT_S, check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        report["error"] = f"CUDA query process failed: {exc}"
        return report
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        report["error"] = f"CUDA query process exited with code {done.returncode}: {last}"
        return report
    try:
        found = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        report["error"] = f"CUDA query process printed no report: {done.stdout.strip()[:200]!r}"
        return report
    report.update(available=bool(found["available"]), devices=found["devices"])
    return report


def format_device_report(report):
    """A rich table of ``report`` for the terminal: a bold title row per section."""
    cpus, mem, shm, nofile = report["cpus"], report["memory"], report["shm"], report["open_files"]
    sections = [
        ("CPU", [("logical", cpus["logical"]), ("usable", cpus["usable"]), ("physical", cpus["physical"])]),
        ("Memory", [("total", human_bytes(mem["total_bytes"])), ("available", human_bytes(mem["available_bytes"]))]),
        (f"Shared memory ({shm['path']})", [
            ("total", human_bytes(shm["total_bytes"]) if shm["total_bytes"] is not None else "missing"),
            ("free", human_bytes(shm["free_bytes"]) if shm["free_bytes"] is not None else "missing"),
        ]),
        ("Open files limit", [("soft", _limit(nofile["soft"])), ("hard", _limit(nofile["hard"]))]),
        ("Torch", list(report["torch"].items())),
        ("Sharing strategies", [
            ("available", ", ".join(report["sharing"]["available"])), ("current", report["sharing"]["current"]),
        ]),
        ("Start methods", [
            ("available", ", ".join(report["start_methods"]["available"])),
            ("default", report["start_methods"]["default"]),
        ]),
        ("CUDA", _cuda_rows(report["cuda"])),
    ]
    # One table rather than one per section, so values line up down the whole report.
    table = Table(show_header=False, box=None, padding=(0, 2), pad_edge=False)
    table.add_column()
    table.add_column()
    for title, rows in sections:
        table.add_row(f"[bold]{escape(title)}[/bold]", "")
        for key, value in rows:
            table.add_row(f"  {escape(str(key))}", "unknown" if value is None else escape(str(value)))
    return table


def _limit(value):
    return "unlimited" if value is None else str(value)


def _cuda_rows(cuda):
    if cuda["error"]:
        return [("error", cuda["error"])]
    if not cuda["available"] or not cuda["devices"]:
        return [("status", "not available")]
    return [
        (f"cuda:{d['index']}", f"{d['name']} (sm {d['capability']}), "
                               f"{human_bytes(d['free_bytes'])} free of {human_bytes(d['total_bytes'])}")
        for d in cuda["devices"]
    ]

