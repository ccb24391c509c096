"""The naive synchronous parallel SGD people write first: every epoch, start N fresh
processes; each trains a copy of the model on its 1/N of the data for one epoch and sends
its state_dict back through a Queue; the parent averages the parameters and evaluates.

    python benchmarks/baselines/naive_sync.py [--data-dir DIR] [--workers 4] [--epochs 3]
        [--start-method fork|spawn] [--optimizer sgd|adam] [--lr LR] [--json FILE]

Prints one JSON line: wall seconds from process start to the end, per-epoch seconds
(spawn, train, collect, average) and accuracy, and training samples/s.
"""

from __future__ import annotations

import argparse
import os
import time

import psutil
import torch
import torch.multiprocessing as mp
import torch.nn.functional as F

import mnist_tensors
from mptrain.models.nets import MnistCNN


def make_optimizer(model, args):
    if args.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=args.lr)
    return torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)


def train_shard(rank, args, epoch, state, x, y, indices, queue, received):
    """One worker, one epoch: load the averaged weights, train on ``indices``, send back."""
    torch.set_num_threads(max(1, os.cpu_count() // args.workers))
    torch.manual_seed(args.seed + epoch * args.workers + rank)
    model = MnistCNN()
    model.load_state_dict(state)
    # A fresh process has a fresh optimizer: momentum (or Adam's moments) restart every epoch.
    optimizer = make_optimizer(model, args)
    model.train()
    for batch in torch.split(indices, args.batch_size):
        optimizer.zero_grad()
        loss = F.nll_loss(model(x[batch]), y[batch])
        loss.backward()
        optimizer.step()
    queue.put((rank, model.state_dict()))
    # The tensors travel as shared-memory file descriptors that the parent fetches from this
    # process when it unpickles them: exiting before then fails the parent with EOFError.
    received.wait()


def average(states):
    return {name: sum(state[name] for state in states) / len(states) for name in states[0]}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    mnist_tensors.add_training_arguments(parser, workers=4, epochs=3, optimizer="sgd", seed=1)
    parser.add_argument("--start-method", default="fork", choices=("fork", "spawn"))
    args = mnist_tensors.parse_training_arguments(parser)
    started = psutil.Process().create_time()

    torch.manual_seed(args.seed)
    x, y, test_x, test_y = mnist_tensors.load(mnist_tensors.data_dir(args.data_dir))
    model = MnistCNN()
    ctx = mp.get_context(args.start_method)
    epochs = []
    for epoch in range(args.epochs):
        epoch_started = time.monotonic()
        order = torch.randperm(len(x))
        queue, received = ctx.Queue(), ctx.Event()
        processes = []
        for rank in range(args.workers):
            shard = order[rank::args.workers]
            p = ctx.Process(target=train_shard,
                            args=(rank, args, epoch, model.state_dict(), x, y, shard, queue,
                                  received))
            p.start()
            processes.append(p)
        states = [state for _, state in sorted(queue.get() for _ in processes)]
        received.set()
        for p in processes:
            p.join()
        failed = [p.exitcode for p in processes if p.exitcode != 0]
        if failed:
            raise SystemExit(f"worker exit codes {failed}")
        model.load_state_dict(average(states))
        epoch_s = time.monotonic() - epoch_started
        epochs.append({"epoch": epoch + 1, "epoch_s": epoch_s, "samples_per_s": len(x) / epoch_s,
                       "test_accuracy": mnist_tensors.accuracy(model, test_x, test_y)})
        # Printed as it goes: a user of this loop watches the epochs go by.
        print(f"epoch {epoch + 1}: {epoch_s:.1f} s, accuracy {epochs[-1]['test_accuracy']:.4f}",
              flush=True)

    train_s = sum(e["epoch_s"] for e in epochs)
    mnist_tensors.emit({
        "baseline": "naive_sync", "start_method": args.start_method, "workers": args.workers,
        "threads_per_worker": max(1, os.cpu_count() // args.workers), "epochs": args.epochs,
        "batch_size": args.batch_size, "optimizer": args.optimizer, "lr": args.lr,
        "wall_s": time.time() - started, "train_s": train_s,
        "samples_per_s": len(x) * args.epochs / train_s,
        "accuracy": [e["test_accuracy"] for e in epochs], "per_epoch": epochs,
        "torch": torch.__version__}, args.json)


if __name__ == "__main__":
    main()
