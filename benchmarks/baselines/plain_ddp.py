"""A hand-written plain DDP loop, as in PyTorch's DDP tutorial: ``mp.spawn`` (or fork), gloo
process group over MASTER_ADDR/MASTER_PORT, DistributedDataParallel, a DistributedSampler
(shuffle=True) feeding a DataLoader (num_workers=0) over a TensorDataset, ``set_epoch``
every epoch, rank 0 evaluates. Every rank reads the data set itself, as such scripts do.

    python benchmarks/baselines/plain_ddp.py [--data-dir DIR] [--workers 2] [--epochs 1]
        [--optimizer adam|sgd] [--lr LR] [--start-method spawn|fork] [--json FILE]

Prints one JSON line: wall seconds from process start to the end, epoch seconds measured on
rank 0 between barriers and the samples/s they give, seconds from process start to rank 0's
first step, and test accuracy after every epoch.
"""

from __future__ import annotations

import argparse
import os
import socket
import time

import psutil
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import mnist_tensors
from mptrain.models.nets import MnistCNN


def free_port() -> int:
    # Instead of the tutorial's fixed 12355: other jobs on the machine may hold that port.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, args, started, results):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=args.workers)
    torch.manual_seed(args.seed)  # the same initial weights on every rank

    x, y, test_x, test_y = mnist_tensors.load(args.data_dir)
    dataset = TensorDataset(x, y)
    sampler = DistributedSampler(dataset, shuffle=True, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, num_workers=0)
    model = DDP(MnistCNN())
    if args.optimizer == "adam":
        optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)

    first_step = None
    epochs = []
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        dist.barrier()
        epoch_started = time.monotonic()
        for data, target in loader:
            if first_step is None:
                first_step = time.time()
            optimizer.zero_grad()
            loss = F.nll_loss(model(data), target)
            loss.backward()
            optimizer.step()
        dist.barrier()
        epoch_s = time.monotonic() - epoch_started
        if rank == 0:
            samples = len(sampler) * args.workers
            epochs.append({"epoch": epoch + 1, "epoch_s": epoch_s,
                           "samples_per_s": samples / epoch_s,
                           "test_accuracy": mnist_tensors.accuracy(model.module, test_x, test_y)})
        dist.barrier()  # the other ranks wait while rank 0 evaluates

    if rank == 0:
        results.put({"epochs": epochs, "first_step_s": first_step - started})
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    mnist_tensors.add_training_arguments(parser)
    parser.add_argument("--start-method", default="spawn", choices=("spawn", "fork"))
    parser.add_argument("--port", type=int, help="MASTER_PORT (default: a free one)")
    args = mnist_tensors.parse_training_arguments(parser)
    args.data_dir = mnist_tensors.data_dir(args.data_dir)
    started = psutil.Process().create_time()

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port or free_port())
    results = mp.get_context(args.start_method).SimpleQueue()
    mp.start_processes(worker, args=(args, started, results), nprocs=args.workers,
                       start_method=args.start_method)
    rank0 = results.get()

    epochs = rank0["epochs"]
    train_s = sum(e["epoch_s"] for e in epochs)
    mnist_tensors.emit({
        "baseline": "plain_ddp", "start_method": args.start_method, "workers": args.workers,
        "threads_per_worker": 1, "epochs": args.epochs, "batch_size": args.batch_size,
        "optimizer": args.optimizer, "lr": args.lr, "wall_s": time.time() - started,
        "epoch_s": train_s / len(epochs),
        "samples_per_s": sum(e["samples_per_s"] * e["epoch_s"] for e in epochs) / train_s,
        "process_start_to_first_step_s": rank0["first_step_s"],
        "accuracy": [e["test_accuracy"] for e in epochs], "per_epoch": epochs,
        "torch": torch.__version__}, args.json)


if __name__ == "__main__":
    main()
