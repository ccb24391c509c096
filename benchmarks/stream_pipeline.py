"""``data_pipeline.py stream``: issue 56's part (b), data larger than /dev/shm read in place by
``--loader stream`` (see that script's doc for what is measured and why)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from common import REPO

FEATURES = 784
#: The factory ``mptrain run --data FILE:make`` calls: the rows mapped from their file,
#: labels from the first feature (learnable), ``targets`` given so that the parent does not
#: read every row for them.
FACTORY = '''
import os

import numpy as np
import torch
from torch.utils.data import Dataset


class MappedRows(Dataset):
    def __init__(self, path, rows):
        self.path, self.rows = path, rows
        self.x = np.memmap(path, dtype=np.float32, mode="r", shape=(rows, 784))
        self.targets = np.load(path + ".targets.npy", mmap_mode="r")

    def __len__(self):
        return self.rows

    def __getitem__(self, index):
        return torch.from_numpy(np.array(self.x[index])), int(self.targets[index])


def make():
    return MappedRows(os.environ["STREAM_BENCH_PATH"],
                      int(os.environ["STREAM_BENCH_ROWS"])), None
'''


def write_set(folder: Path, name: str, nbytes: int) -> tuple[Path, int]:
    """A file of float32 rows, ``nbytes`` in all, written in chunks (never held whole)."""
    import numpy as np

    rows = max(64, nbytes // (FEATURES * 4))
    path = folder / name
    mapped = np.memmap(path, dtype=np.float32, mode="w+", shape=(rows, FEATURES))
    rng = np.random.default_rng(0)
    targets = np.empty(rows, dtype=np.int64)
    for start in range(0, rows, 8192):
        chunk = rng.standard_normal((min(8192, rows - start), FEATURES), dtype=np.float32)
        mapped[start:start + len(chunk)] = chunk
        targets[start:start + len(chunk)] = (chunk[:, 0] > 0).astype(np.int64)
    mapped.flush()
    del mapped
    np.save(str(path) + ".targets.npy", targets)
    return path, rows


class StreamSampler(threading.Thread):
    """Peaks, polled every ``interval_s`` (one smaps_rollup per process: the run is not
    slowed much): the shared memory the run's processes map (``Pss_Shmem`` summed over the
    tree: each page once, whoever else writes /dev/shm meanwhile), /dev/shm's use above its
    use before the run (the whole machine's: informative on a quiet one), and each
    descendant's anonymous memory."""

    def __init__(self, pid: int, interval_s: float = 0.2):
        super().__init__(daemon=True)
        self.pid, self.interval_s = pid, interval_s
        self.base_shm = _shm_used()
        self.peak_shm = self.peak_tree_shm = 0
        self.peak_anon: dict[int, int] = {}
        self._done = threading.Event()

    def run(self):
        import psutil

        try:
            root = psutil.Process(self.pid)
        except psutil.NoSuchProcess:
            return
        while not self._done.is_set():
            self.peak_shm = max(self.peak_shm, _shm_used() - self.base_shm)
            try:
                children = root.children(recursive=True)
            except psutil.NoSuchProcess:
                return
            tree_shm = _rollup(self.pid, "Pss_Shmem") or 0
            for child in children:
                anon = _rollup(child.pid, "Anonymous")
                if anon is not None:
                    self.peak_anon[child.pid] = max(self.peak_anon.get(child.pid, 0), anon)
                tree_shm += _rollup(child.pid, "Pss_Shmem") or 0
            self.peak_tree_shm = max(self.peak_tree_shm, tree_shm)
            self._done.wait(self.interval_s)

    def stop(self):
        self._done.set()
        self.join()


def _shm_used() -> int:
    stats = os.statvfs("/dev/shm")
    return (stats.f_blocks - stats.f_bfree) * stats.f_frsize


def _rollup(pid: int, field: str) -> int | None:
    """``field`` of /proc/PID/smaps_rollup in bytes (None: gone, or not this kernel's)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as handle:
            fields = dict(line.split(":", 1) for line in handle if ":" in line)
        return int(fields[field].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return None


def _train(args, folder: Path, path: Path, rows: int, loader: str, sample: bool,
           epochs: int | None = None) -> dict:
    command = [sys.executable, "-m", "mptrain", "run", "--data", str(folder / "factory.py:make"),
               "--model", "mlp", "--strategy", "ddp", "--workers", "2", "--epochs",
               str(epochs or args.epochs), "--batch-size", "64", "--loader", loader,
               "--threads-per-worker", str(args.threads), "--quiet"]
    if args.steps_per_epoch:
        command += ["--steps-per-epoch", str(args.steps_per_epoch)]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src") + os.pathsep +
           os.environ.get("PYTHONPATH", ""), "MPTRAIN_SHM_FREE_MIB": str(args.shm_mib),
           "STREAM_BENCH_PATH": str(path), "STREAM_BENCH_ROWS": str(rows)}
    with tempfile.TemporaryDirectory() as out:
        started = time.monotonic()
        process = subprocess.Popen(command + ["--out", out], stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, env=env)
        sampler = StreamSampler(process.pid) if sample else None
        if sampler is not None:
            sampler.start()
        output, _ = process.communicate(timeout=3600)
        if sampler is not None:
            sampler.stop()
        if process.returncode != 0:
            sys.exit(f"{' '.join(command)} failed:\n{output[-2000:]}")
        summary = json.loads((Path(out) / "summary.json").read_text())
    figures = {"loader": summary.get("loader"), "loader_reason": summary.get("loader_reason"),
               "samples_per_s": summary.get("train_samples_per_s"),
               "wall_s": time.monotonic() - started}
    if sampler is not None:
        # The two workers: the processes with the most anonymous memory below the parent.
        workers = sorted(sampler.peak_anon.values(), reverse=True)[:2]
        figures.update(peak_shm_of_the_run_bytes=sampler.peak_tree_shm,
                       peak_shm_growth_machine_bytes=sampler.peak_shm,
                       peak_anon_per_worker=workers)
    return figures


def stream(args) -> dict:
    shm = int(args.shm_mib * 2**20)
    with tempfile.TemporaryDirectory() as temp:
        folder = Path(temp)
        (folder / "factory.py").write_text(FACTORY)
        big, big_rows = write_set(folder, "big.f32", 2 * shm)
        small, small_rows = write_set(folder, "small.f32", 2 * shm // 64)
        data_bytes = big_rows * FEATURES * 4
        streamed = _train(args, folder, big, big_rows, "auto", True)
        # The baseline reads as many samples (64 epochs of a set 1/64 the size), so that
        # its workers live as long, are sampled as often and hold what reading costs: what
        # the big set's workers hold beyond it is what grows with the data.
        baseline = _train(args, folder, small, small_rows, "stream", True,
                          epochs=64 * args.epochs)
        if streamed["loader"] != "stream":
            sys.exit(f"--loader auto chose {streamed['loader']} for data twice the "
                     f"{args.shm_mib:g} MiB of /dev/shm it was told of")
        growth = [max(0, a - b) for a, b in zip(streamed["peak_anon_per_worker"],
                                                baseline["peak_anon_per_worker"])]
        fits, fits_rows = write_set(folder, "fits.f32", shm // 4)
        stacked = _train(args, folder, fits, fits_rows, "stacked", False)
        fits_streamed = _train(args, folder, fits, fits_rows, "stream", False)
    worst = max([streamed["peak_shm_of_the_run_bytes"], *growth]) / data_bytes
    # Both workers seen in both runs, or the anonymous half of the target was not measured.
    measured = len(growth) == 2
    return {"synthetic_shm_mib": args.shm_mib, "data_bytes": data_bytes,
            "big_set": streamed, "small_set_baseline": baseline,
            "anon_growth_per_worker_bytes": growth,
            "worst_share_of_data": worst if measured else None,
            "target_met": (worst < 0.10) if measured else None,
            "fits_stacked": stacked, "fits_streamed": fits_streamed,
            "stream_over_stacked": (fits_streamed["samples_per_s"] or 0) /
            (stacked["samples_per_s"] or 1)}
