"""Memory of reading a LEAF folder (``--data leaf:DIR``): writes a FEMNIST-like folder of a
given size, loads it in a fresh process and reports the load's peak RSS against the bytes
of the arrays it fills (a memory figure, not a speed one).

    python benchmarks/leaf_load.py                         # 20,000 samples in 4 files
    python benchmarks/leaf_load.py --samples 800000 --files 36 --json auto   # FEMNIST-size
    python benchmarks/leaf_load.py --folder /data/femnist  # an existing LEAF folder

The folder's pixels are mostly 1.0 (background) with strokes of k/255 values, so the JSON
text per sample is about as long as LEAF's own (~6 kB). ``extra`` is the peak RSS above
the process's RSS before loading, minus the arrays: what the reader held beyond its
result (one file's text and one user's Python objects, by design).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_info, result_path, write_json  # noqa: E402

MEASURE = r"""
import json, sys, time
from mptrain.data.sources import load_data

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024

before = status("VmRSS:")
started = time.perf_counter()
bundle = load_data("leaf:" + sys.argv[1])
seconds = time.perf_counter() - started
print(json.dumps({"rss_before": before, "peak_rss": status("VmHWM:"), "seconds": seconds,
                  "array_bytes": bundle.nbytes, "samples": len(bundle.train),
                  "test_samples": len(bundle.test) if bundle.test is not None else 0,
                  "clients": bundle.clients.count, "kind": bundle.name}))
"""


def write_folder(root: Path, samples: int, files: int, per_user: int, seed: int) -> int:
    """A FEMNIST-like LEAF folder (90% of each user's samples train, 10% test), written a
    user at a time; returns its size in bytes."""
    rng = np.random.default_rng(seed)
    levels = (np.arange(256) / 255).tolist()
    users = max(1, samples // per_user)
    for split in ("train", "test"):
        (root / split).mkdir(parents=True, exist_ok=True)
    for index, chunk in enumerate(np.array_split(np.arange(users), files)):
        uids = [f"f{u:07d}" for u in chunk]
        for split, share in (("train", 0.9), ("test", 0.1)):
            count = max(1, int(per_user * share))
            with (root / split / f"all_data_{index}_{split}.json").open("w") as out:
                out.write(json.dumps({"users": uids, "num_samples": [count] * len(uids)})[:-1])
                out.write(', "user_data": {')
                for position, uid in enumerate(uids):
                    ink = rng.random((count, 784)) < 0.2
                    values = np.where(ink, rng.integers(0, 256, (count, 784)), 255)
                    x = [[levels[v] for v in row] for row in values.tolist()]
                    y = rng.integers(0, 62, count).tolist()
                    out.write(("," if position else "") + json.dumps(uid) + ": " +
                              json.dumps({"x": x, "y": y}))
                out.write("}}")
    return sum(p.stat().st_size for p in root.rglob("*.json"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--per-user", type=int, default=220, help="LEAF's mean is ~226")
    parser.add_argument("--folder", help="measure this LEAF folder instead of writing one")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default="none", help="PATH, auto or none")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="leaf-load-") as scratch:
        folder = Path(args.folder) if args.folder else Path(scratch) / "femnist"
        if args.folder is None:
            folder_bytes = write_folder(folder, args.samples, args.files, args.per_user,
                                        args.seed)
        else:
            folder_bytes = sum(p.stat().st_size for p in folder.rglob("*.json"))
        largest = max(p.stat().st_size for p in folder.rglob("*.json"))
        done = subprocess.run([sys.executable, "-c", MEASURE, str(folder)], check=True,
                              capture_output=True, text=True)
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    grown = figures["peak_rss"] - figures["rss_before"]
    figures.update(folder_bytes=folder_bytes, largest_file_bytes=largest,
                   extra_bytes=grown - figures["array_bytes"],
                   peak_over_arrays=grown / figures["array_bytes"])
    mib = 2 ** 20
    print(f"{figures['kind']}: {figures['samples']:,} train + {figures['test_samples']:,} test "
          f"samples, {figures['clients']:,} clients, JSON {folder_bytes / mib:,.0f} MiB "
          f"(largest file {largest / mib:,.0f} MiB)")
    print(f"arrays {figures['array_bytes'] / mib:,.0f} MiB · RSS grew {grown / mib:,.0f} MiB "
          f"({figures['peak_over_arrays']:.2f}x the arrays; {figures['extra_bytes'] / mib:,.0f} "
          f"MiB beyond them) · {figures['seconds']:.1f} s")
    path = result_path("leaf-load", args.json)
    if path is not None:
        write_json(path, {"machine": machine_info(), "args": vars(args), **figures})
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
