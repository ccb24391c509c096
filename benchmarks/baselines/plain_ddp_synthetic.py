"""The plain DDP loop of ``plain_ddp.py`` on the communication-bound workloads of issue 24
(``benchmarks/comm_workloads.py``): fork (or ``mp.spawn``), a gloo process group over
MASTER_ADDR/MASTER_PORT, DistributedDataParallel with its default buckets (gradients
all-reduced while backward runs), a DistributedSampler (shuffle=True) and a fixed number of
steps per rank, one thread per rank. Rank 0 evaluates after training.

    python benchmarks/baselines/plain_ddp_synthetic.py --model mlp|resnet18
        [--data synthetic_images|synthetic_images_small] [--workers 2] [--steps 200]
        [--batch-size 64] [--optimizer sgd|adam] [--lr LR] [--momentum 0.9]
        [--start-method fork|spawn] [--loader dataloader|index] [--json FILE]

``--loader dataloader`` (default) is the tutorial's DataLoader (num_workers=0) over the
TensorDataset; ``--loader index`` gathers each batch with one tensor index, as mptrain does,
so that only the collectives differ. Prints one JSON line: samples/s over the steps, timed on
rank 0 between barriers (every rank's first step included, as in mptrain's figure), the mean
training loss over all ranks' steps, and the test loss and accuracy after training.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/
import comm_workloads  # noqa: E402
from mnist_tensors import emit  # noqa: E402  (this folder, as plain_ddp.py imports it)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def batches(dataset, sampler, args):
    """``args.steps`` batches of this rank, over as many epochs as that takes."""
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, num_workers=0)
    inputs, targets = dataset.tensors
    steps, epoch = 0, 0
    while True:
        sampler.set_epoch(epoch)
        if args.loader == "dataloader":
            source = iter(loader)
        else:
            order = torch.tensor(list(sampler))
            source = ((inputs[i], targets[i]) for i in order.split(args.batch_size))
        for batch in source:
            if steps == args.steps:
                return
            yield batch
            steps += 1
        epoch += 1


def worker(rank, args, data, results):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=args.workers)
    if data is None:   # spawn: every rank builds the data set itself, as such scripts do
        data = getattr(comm_workloads, args.data)()
    train, test = data
    torch.manual_seed(args.seed)  # the same initial weights on every rank (and as mptrain's)
    model = DDP(comm_workloads.MODELS[args.model]())
    if args.optimizer == "adam":
        optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    sampler = DistributedSampler(train, shuffle=True, seed=args.seed)

    model.train()
    loss_sum = torch.zeros((), dtype=torch.float64)
    dist.barrier()
    started = time.monotonic()
    for data_batch, target in batches(train, sampler, args):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data_batch), target)
        loss.backward()
        optimizer.step()
        loss_sum += loss.detach()
    dist.barrier()
    train_s = time.monotonic() - started

    dist.all_reduce(loss_sum)
    if rank == 0:
        results.put({"train_s": train_s,
                     "train_loss": float(loss_sum) / (args.steps * args.workers),
                     **evaluate(model.module, test)})
    dist.barrier()   # the other ranks wait while rank 0 evaluates
    dist.destroy_process_group()


@torch.no_grad()
def evaluate(model, test, batch_size: int = 500) -> dict:
    model.eval()
    inputs, targets = test.tensors
    loss, correct = 0.0, 0
    for start in range(0, len(targets), batch_size):
        output = model(inputs[start:start + batch_size])
        target = targets[start:start + batch_size]
        loss += float(F.cross_entropy(output, target, reduction="sum"))
        correct += int((output.argmax(1) == target).sum())
    return {"test_loss": loss / len(targets), "test_accuracy": correct / len(targets)}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, choices=sorted(comm_workloads.MODELS))
    parser.add_argument("--data", default="synthetic_images",
                        choices=("synthetic_images", "synthetic_images_small"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=200, help="steps per rank")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--optimizer", default="sgd", choices=("adam", "sgd"))
    parser.add_argument("--lr", type=float, default=0.02)
    parser.add_argument("--momentum", type=float, default=0.9, help="sgd only")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--start-method", default="fork", choices=("spawn", "fork"))
    parser.add_argument("--loader", default="dataloader", choices=("dataloader", "index"))
    parser.add_argument("--port", type=int, help="MASTER_PORT (default: a free one)")
    parser.add_argument("--json")
    args = parser.parse_args()

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port or free_port())
    data = None
    if args.start_method == "fork":
        # Built once before forking, and on one thread: the forked ranks then share its
        # pages, and no OpenMP pool exists in the parent to hang a forked child.
        torch.set_num_threads(1)
        data = getattr(comm_workloads, args.data)()
    results = mp.get_context(args.start_method).SimpleQueue()
    mp.start_processes(worker, args=(args, data, results), nprocs=args.workers,
                       start_method=args.start_method)
    rank0 = results.get()

    samples = args.steps * args.batch_size * args.workers
    emit({"baseline": "plain_ddp_synthetic", "model": args.model, "data": args.data,
          "start_method": args.start_method, "loader": args.loader, "workers": args.workers,
          "threads_per_worker": 1, "steps": args.steps, "batch_size": args.batch_size,
          "optimizer": args.optimizer, "lr": args.lr, "momentum": args.momentum,
          "train_s": rank0["train_s"], "samples_per_s": samples / rank0["train_s"],
          "train_loss": rank0["train_loss"], "test_loss": rank0["test_loss"],
          "accuracy": rank0["test_accuracy"], "torch": torch.__version__}, args.json)


if __name__ == "__main__":
    main()
