"""The structure of PyTorch's examples/mnist_hogwild: one model in shared memory, N processes
each running ``train()`` with its own SGD optimizer over the WHOLE training set (the classic
way: N processes do N epochs' worth of samples per "epoch"), joined without looking at their
exit codes, then one test in the parent.

    python benchmarks/baselines/classic_hogwild.py [--data-dir DIR] [--workers 2]
        [--epochs 1] [--shard] [--start-method spawn|fork] [--threads N] [--json FILE]

``--shard`` gives each process 1/N of the data instead (equal work with mptrain's hogwild).
Like the example, the script sets no thread count unless ``--threads`` is given, and uses a
DataLoader (shuffle=True, num_workers=0) over the tensors. Prints one JSON line: wall seconds
from process start to the end, training seconds (first start to last join), samples the
workers report having processed, samples/s, accuracy, and the exit codes it did not check.
"""

from __future__ import annotations

import argparse
import time

import psutil
import torch
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.utils.data import DataLoader, Subset, TensorDataset

import mnist_tensors
from mptrain.models.nets import MnistCNN


def train(rank, args, model, dataset, dataloader_kwargs, processed):
    """One hogwild process, as in the example's train.py (plus a count of samples done)."""
    torch.manual_seed(args.seed + rank)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.shard:
        dataset = Subset(dataset, range(rank, len(dataset), args.workers))
    train_loader = DataLoader(dataset, **dataloader_kwargs)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    for epoch in range(1, args.epochs + 1):
        train_epoch(model, train_loader, optimizer)
    with processed.get_lock():
        processed.value += len(dataset) * args.epochs


def train_epoch(model, data_loader, optimizer):
    model.train()
    for data, target in data_loader:
        optimizer.zero_grad()
        loss = F.nll_loss(model(data), target)
        loss.backward()
        optimizer.step()


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir")
    parser.add_argument("--workers", type=int, default=2, help="the example's --num-processes")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--momentum", type=float, default=0.5)
    parser.add_argument("--shard", action="store_true",
                        help="each process trains on 1/N of the data (equal work)")
    parser.add_argument("--start-method", default="spawn", choices=("spawn", "fork"),
                        help="spawn, as the example forces")
    parser.add_argument("--threads", type=int,
                        help="torch threads per process (default: torch's, as the example)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json")
    args = parser.parse_args()
    started = psutil.Process().create_time()

    x, y, test_x, test_y = mnist_tensors.load(mnist_tensors.data_dir(args.data_dir))
    dataset = TensorDataset(x, y)
    kwargs = {"batch_size": args.batch_size, "shuffle": True}

    torch.manual_seed(args.seed)
    mp.set_start_method(args.start_method, force=True)
    model = MnistCNN()
    model.share_memory()  # gradients are allocated lazily, so they are not shared here
    processed = mp.Value("q", 0)

    train_started = time.monotonic()
    processes = []
    for rank in range(args.workers):
        p = mp.Process(target=train, args=(rank, args, model, dataset, kwargs, processed))
        p.start()
        processes.append(p)
    for p in processes:
        p.join()  # as in the example: a crashed process goes unnoticed
    train_s = time.monotonic() - train_started

    test_accuracy = mnist_tensors.accuracy(model, test_x, test_y)
    mnist_tensors.emit({
        "baseline": "classic_hogwild", "start_method": args.start_method,
        "workers": args.workers, "shard": args.shard, "threads_per_worker": args.threads,
        "epochs": args.epochs, "batch_size": args.batch_size, "lr": args.lr,
        "momentum": args.momentum, "wall_s": time.time() - started, "train_s": train_s,
        "samples_processed": processed.value, "samples_per_s": processed.value / train_s,
        "accuracy": test_accuracy, "unchecked_exit_codes": [p.exitcode for p in processes],
        "torch": torch.__version__}, args.json)


if __name__ == "__main__":
    main()
