"""The plain PyTorch loop a user writes first: one process, the classic MNIST CNN, tensors
in memory, randperm batches. The reference for mptrain's efficiency figures.

    python benchmarks/plain_loop.py --data-dir DIR [--threads 1] [--epochs 1] [--json FILE]
    python benchmarks/plain_loop.py --data digits-60k --device cuda [--channels-last]

On a GPU the data set lives on the device (what a user does when it fits) and nothing in the
loop waits for the GPU: the clock stops after one ``synchronize`` at the epoch's end. That is
the reference ``mptrain run --strategy single --device cuda`` is held to (issue 40); the GPU
machine has no MNIST files, so it compares on digits-60k, which mptrain builds in memory.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import psutil
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
from mptrain.data.idx import load_mnist  # noqa: E402  (reader only: same data as mptrain)
from mptrain.data.sources import load_data  # noqa: E402
from mptrain.models.nets import MnistCNN  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", help="the MNIST IDX files (with --data mnist)")
    parser.add_argument("--data", default="mnist", choices=("mnist", "digits-60k"))
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--channels-last", action="store_true",
                        help="model and batches in channels-last memory format")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.001)
    parser.add_argument("--optimizer", default="adam", choices=("adam", "sgd"))
    parser.add_argument("--json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    x, y, tx, ty = _tensors(args)
    device = torch.device(args.device)
    layout = torch.channels_last if args.channels_last else torch.contiguous_format
    x, y = x.to(device).contiguous(memory_format=layout), y.to(device)
    tx, ty = tx.to(device).contiguous(memory_format=layout), ty.to(device)
    model = MnistCNN().to(device, memory_format=layout)
    optimizer = (torch.optim.Adam(model.parameters(), lr=args.lr) if args.optimizer == "adam"
                 else torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9))
    first_step = None
    epochs = []
    for epoch in range(args.epochs):
        model.train()
        order = torch.randperm(len(x), device=device)
        _synchronize(device)
        started = time.monotonic()
        for batch in torch.split(order, args.batch_size):
            if first_step is None:
                first_step = time.time()
            optimizer.zero_grad()
            loss = F.nll_loss(model(x[batch]), y[batch])
            loss.backward()
            optimizer.step()
        _synchronize(device)
        seconds = time.monotonic() - started
        model.eval()
        with torch.no_grad():
            correct = sum(int((model(tx[i:i + 1000]).argmax(1) == ty[i:i + 1000]).sum())
                          for i in range(0, len(tx), 1000))
        epochs.append({"epoch": epoch + 1, "epoch_s": seconds,
                       "samples_per_s": len(x) / seconds, "test_accuracy": correct / len(tx)})
    result = {"samples_per_s": sum(e["samples_per_s"] for e in epochs) / len(epochs),
              "epochs": epochs, "threads": args.threads, "data": args.data,
              "device": _device_name(device), "channels_last": args.channels_last,
              "batch_size": args.batch_size, "optimizer": args.optimizer,
              "process_start_to_first_step_s": first_step - psutil.Process().create_time()}
    print(json.dumps(result))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=2)


def _tensors(args):
    """Normalised training and test tensors, NCHW, on the CPU."""
    if args.data == "digits-60k":
        bundle = load_data("digits-60k").materialize_()
        return (bundle.train.inputs, bundle.train.targets,
                bundle.test.inputs, bundle.test.targets)
    if args.data_dir is None:
        sys.exit("--data mnist needs --data-dir DIR (the MNIST IDX files)")
    train_x, train_y, test_x, test_y = load_mnist(args.data_dir)
    x = ((torch.from_numpy(train_x).float() / 255 - 0.1307) / 0.3081).unsqueeze(1)
    tx = ((torch.from_numpy(test_x).float() / 255 - 0.1307) / 0.3081).unsqueeze(1)
    return x, torch.from_numpy(train_y), tx, torch.from_numpy(test_y)


def _synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _device_name(device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


if __name__ == "__main__":
    main()
