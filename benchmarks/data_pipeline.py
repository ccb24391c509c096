"""Issue 56's data pipeline, part (a): augmentation in mptrain's workers against the loop
PyTorch users write, and the shared memory MNIST takes as uint8 against float32.

    python benchmarks/data_pipeline.py augment [--data-dir DIR] [--epochs 10] [--json auto]
    python benchmarks/data_pipeline.py memory [--data-dir DIR] [--workers 2] [--json auto]
    python benchmarks/data_pipeline.py stream [--shm-mib 256] [--epochs 1] [--json auto]

``augment``, three runs of the classic MNIST CNN (MNIST's recipe: Adam, lr 0.006, batch 64,
``--threads`` each), each reporting test accuracy after ``--epochs`` and training samples/s:

- ``mptrain``: ``mptrain run --data mnist --augment shift:2`` (``--strategy``, single by
  default): pixels uint8 in shared memory, each batch shifted in the worker;
- ``stacked``: the same without ``--augment`` (what augmentation costs, what it buys);
- ``dataloader``: a plain loop over ``DataLoader(num_workers=2, shuffle=True)`` whose
  ``__getitem__`` shifts each normalised image by up to 2 pixels (the same transform, per
  sample, in the loader's processes), Adam with the same settings.

``stream`` (part (b)): a memory-mapped data set twice the size of ``/dev/shm``'s free space,
scaled down by a documented synthetic limit: ``MPTRAIN_SHM_FREE_MIB=--shm-mib`` makes
mptrain take /dev/shm as that small, and the set (flat 784-float rows, a file in a temp
folder) is twice it. ``mptrain run --strategy ddp --workers 2`` with ``--loader auto`` must
choose the stream loader (checked in summary.json); sampled every 0.2 s meanwhile: the
shared memory the run's processes map (``Pss_Shmem`` over the tree, each page once; /dev/shm's
growth is reported too, but other programs' segments count there), and each worker
process's anonymous memory (``Anonymous`` of
/proc/PID/smaps_rollup), reported as its peak and as its peak above the same worker's on a
set 1/64 the size (torch's own heap is ~100 MiB whatever the data). Target: both under 10%
of the data set. Then, on a set that fits (``--shm-mib`` / 4), samples/s of ``--loader
stacked`` against ``--loader stream``.

``memory``: peak PSS of the whole process tree (the data set counted once, however many
workers map it) for ``mptrain run --data mnist --strategy sync --workers N`` with
``--data-dtype uint8`` and ``float32``, a few steps each. Memory figures hold under load;
the samples/s of ``augment`` want a quiet machine (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))
from common import (REPO, machine_info, mnist_dir, result_path, run_measured,  # noqa: E402
                    write_json)

SHIFT = 2


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", choices=("augment", "memory", "stream", "_dataloader"))
    parser.add_argument("--shm-mib", type=float, default=256,
                        help="stream: the /dev/shm mptrain is told it has (the set is twice it)")
    parser.add_argument("--data-dir", help="the MNIST IDX files (MPTRAIN_MNIST_DIR)")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--steps-per-epoch", type=int, help="cut epochs short (smoke tests)")
    parser.add_argument("--strategy", default="single")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", default="auto", help="PATH, auto or none")
    args = parser.parse_args(argv)
    if args.part == "_dataloader":
        print(json.dumps(dataloader_loop(args)))
        return
    if args.part == "stream":
        from stream_pipeline import stream

        figures = stream(args)
    else:
        data_dir = mnist_dir(args.data_dir)
        figures = augment(args, data_dir) if args.part == "augment" else memory(args, data_dir)
    record = {"part": args.part, "machine": machine_info(), "args": vars(args), **figures}
    print(json.dumps(figures, indent=2))
    path = result_path(f"data-pipeline-{args.part}", args.json)
    if path is not None:
        write_json(path, record)


def _mptrain(args, data_dir, *extra) -> list[str]:
    command = [sys.executable, "-m", "mptrain", "run", "--data", "mnist", "--data-dir",
               str(data_dir), "--epochs", str(args.epochs), "--threads-per-worker",
               str(args.threads), "--quiet", *extra]
    if args.steps_per_epoch:
        command += ["--steps-per-epoch", str(args.steps_per_epoch)]
    return command


def _env() -> dict:
    return {"PYTHONPATH": str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _summary_of(command: list[str], sample_memory: bool) -> dict:
    with tempfile.TemporaryDirectory() as out:
        ran = run_measured(command + ["--out", out], env=_env(), sample_memory=sample_memory)
        if ran["returncode"] != 0:
            sys.exit(f"{' '.join(command)} failed:\n{ran['output'][-2000:]}")
        summary = json.loads((Path(out) / "summary.json").read_text())
    return {"test_accuracy": summary.get("test_accuracy"),
            "samples_per_s": summary.get("train_samples_per_s"),
            "wall_s": ran["wall_s"], "peak_pss_bytes": ran["peak_pss_bytes"]}


def augment(args, data_dir) -> dict:
    workers = [] if args.strategy == "single" else ["--workers", str(args.workers)]
    mine = _mptrain(args, data_dir, "--strategy", args.strategy, *workers)
    loop = [sys.executable, __file__, "_dataloader", "--data-dir", str(data_dir),
            "--epochs", str(args.epochs), "--threads", str(args.threads)]
    if args.steps_per_epoch:
        loop += ["--steps-per-epoch", str(args.steps_per_epoch)]
    done = subprocess.run(loop, capture_output=True, text=True, env={**os.environ, **_env()})
    if done.returncode != 0:
        sys.exit(f"the DataLoader loop failed:\n{done.stderr[-2000:]}")
    return {"mptrain_augmented": _summary_of(mine + ["--augment", f"shift:{SHIFT}"], False),
            "mptrain_stacked": _summary_of(mine, False),
            "dataloader_augmented": json.loads(done.stdout.strip().splitlines()[-1])}


def memory(args, data_dir) -> dict:
    base = _mptrain(args, data_dir, "--strategy", "sync", "--workers", str(args.workers))
    return {dtype: _summary_of(base + ["--data-dtype", dtype], True)
            for dtype in ("uint8", "float32")}


def dataloader_loop(args) -> dict:
    """The loop a PyTorch user writes: a Dataset that normalises and shifts each sample, a
    DataLoader with two worker processes, Adam; samples/s over the training steps only."""
    import torch
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, Dataset

    from mptrain.data.idx import load_mnist
    from mptrain.data.sources import MNIST_MEAN, MNIST_STD
    from mptrain.models.nets import MnistCNN

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    train_x, train_y, test_x, test_y = load_mnist(args.data_dir)

    class Shifted(Dataset):
        def __init__(self, images, labels):
            self.images, self.labels = torch.from_numpy(images), torch.from_numpy(labels)

        def __len__(self):
            return len(self.images)

        def __getitem__(self, index):
            image = (self.images[index].float() / 255 - MNIST_MEAN) / MNIST_STD
            padded = F.pad(image, (SHIFT,) * 4, value=-MNIST_MEAN / MNIST_STD)
            dy, dx = torch.randint(0, 2 * SHIFT + 1, (2,)).tolist()
            return padded[dy:dy + 28, dx:dx + 28].unsqueeze(0), self.labels[index]

    loader = DataLoader(Shifted(train_x, train_y), batch_size=64, shuffle=True, num_workers=2,
                        persistent_workers=True)
    model = MnistCNN()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.006, betas=(0.9, 0.999))
    tx = ((torch.from_numpy(test_x).float() / 255 - MNIST_MEAN) / MNIST_STD).unsqueeze(1)
    ty = torch.from_numpy(test_y)
    samples, seconds, accuracy = 0, 0.0, None
    for epoch in range(args.epochs):
        for group in optimizer.param_groups:   # the recipe's step decay, 0.5 an epoch
            group["lr"] = 0.006 * 0.5 ** epoch
        model.train()
        started = time.monotonic()
        for step, (x, y) in enumerate(loader):
            if args.steps_per_epoch and step == args.steps_per_epoch:
                break
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
            samples += len(y)
        seconds += time.monotonic() - started
        model.eval()
        with torch.no_grad():
            correct = sum(int((model(tx[i:i + 1000]).argmax(1) == ty[i:i + 1000]).sum())
                          for i in range(0, len(tx), 1000))
        accuracy = correct / len(tx)
    return {"test_accuracy": accuracy, "samples_per_s": samples / seconds}


if __name__ == "__main__":
    main()
