"""The same training job written for Hugging Face Accelerate: ``Accelerator(cpu=True)``,
``prepare(model, optimizer, loader)`` over a DataLoader (shuffle=True) on a TensorDataset,
``accelerator.backward``, the main process evaluates.

    python benchmarks/baselines/accelerate_run.py [--data-dir DIR] [--workers 2]
        [--epochs 1] [--optimizer adam|sgd] [--lr LR] [--json FILE]

Started like this, the script launches itself on ``--workers`` CPU processes with
``python -m torch.distributed.run --standalone --nproc_per_node N`` (torchrun, which also
sets OMP_NUM_THREADS=1 per rank). The same ranks come from

    accelerate launch --multi_gpu --num_processes 2 benchmarks/baselines/accelerate_run.py

(``--multi_gpu`` selects accelerate's torchrun launcher; with ``Accelerator(cpu=True)`` the
ranks train on the CPU over gloo), whereas ``accelerate launch --cpu --num_processes 2``
runs ONE process: on one machine accelerate's multi-CPU mode expects mpirun.

Needs ``accelerate`` (``pip install -e '.[baselines]'``); without it the script says so in
one line and exits 0. Prints one JSON line: wall seconds from process start to the end,
epoch seconds on rank 0 between barriers and the samples/s they give, seconds from process
start to rank 0's first step, test accuracy.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

try:
    import accelerate
    from accelerate import Accelerator
except ImportError:
    print("accelerate_run: skipped (accelerate is not installed; "
          "pip install -e '.[baselines]')")
    sys.exit(0)

import psutil
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import mnist_tensors
from mptrain.models.nets import MnistCNN

STARTED_ENV, RESULT_ENV = "BASELINE_STARTED", "BASELINE_RESULT"


def launch(args) -> int:
    """Run this script under torchrun; print rank 0's result with the whole wall time."""
    started = psutil.Process().create_time()
    with tempfile.TemporaryDirectory() as temp:
        result_path = os.path.join(temp, "rank0.json")
        env = {**os.environ, STARTED_ENV: str(started), RESULT_ENV: result_path}
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   "--nproc_per_node", str(args.workers), os.path.abspath(__file__),
                   *sys.argv[1:]]
        code = subprocess.run(command, env=env).returncode
        if code != 0:
            return code
        with open(result_path) as handle:
            result = json.load(handle)
    result["wall_s"] = time.time() - started
    mnist_tensors.emit(result, args.json)
    return 0


def train(args):
    accelerator = Accelerator(cpu=True)
    started = float(os.environ.get(STARTED_ENV) or psutil.Process().create_time())
    accelerate.utils.set_seed(args.seed)

    x, y, test_x, test_y = mnist_tensors.load(mnist_tensors.data_dir(args.data_dir))
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True)
    model = MnistCNN()
    if args.optimizer == "adam":
        optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    first_step = None
    epochs = []
    for epoch in range(args.epochs):
        model.train()
        samples = 0
        accelerator.wait_for_everyone()
        epoch_started = time.monotonic()
        for data, target in loader:
            if first_step is None:
                first_step = time.time()
            optimizer.zero_grad()
            loss = F.nll_loss(model(data), target)
            accelerator.backward(loss)
            optimizer.step()
            samples += len(target)
        accelerator.wait_for_everyone()
        epoch_s = time.monotonic() - epoch_started
        if accelerator.is_main_process:
            epochs.append({"epoch": epoch + 1, "epoch_s": epoch_s,
                           "samples_per_s": samples * accelerator.num_processes / epoch_s,
                           "test_accuracy": mnist_tensors.accuracy(
                               accelerator.unwrap_model(model), test_x, test_y)})
        accelerator.wait_for_everyone()  # the other ranks wait while rank 0 evaluates

    if accelerator.is_main_process:
        train_s = sum(e["epoch_s"] for e in epochs)
        result = {
            "baseline": "accelerate", "workers": accelerator.num_processes,
            "distributed_type": str(accelerator.distributed_type),
            "threads_per_worker": torch.get_num_threads(), "epochs": args.epochs,
            "batch_size": args.batch_size, "optimizer": args.optimizer, "lr": args.lr,
            "wall_s": time.time() - started, "epoch_s": train_s / len(epochs),
            "samples_per_s": sum(e["samples_per_s"] * e["epoch_s"] for e in epochs) / train_s,
            "process_start_to_first_step_s": first_step - started,
            "accuracy": [e["test_accuracy"] for e in epochs], "per_epoch": epochs,
            "accelerate": accelerate.__version__, "torch": torch.__version__}
        if os.environ.get(RESULT_ENV):
            with open(os.environ[RESULT_ENV], "w") as handle:
                json.dump(result, handle)
        else:  # launched by hand with torchrun or accelerate launch
            mnist_tensors.emit(result, args.json)
    accelerator.end_training()


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    mnist_tensors.add_training_arguments(parser)
    args = mnist_tensors.parse_training_arguments(parser)
    if "LOCAL_RANK" not in os.environ:  # started by hand: become the launcher
        sys.exit(launch(args))
    train(args)


if __name__ == "__main__":
    main()
