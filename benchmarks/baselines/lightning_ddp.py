"""The same training job written for Lightning: a LightningModule around the classic MNIST
CNN, a DataLoader (shuffle=True; Lightning swaps in a DistributedSampler) over a
TensorDataset, validation at the end of every epoch, Trainer on 2 CPU processes.

    python benchmarks/baselines/lightning_ddp.py [--data-dir DIR] [--workers 2] [--epochs 1]
        [--strategy ddp|ddp_spawn] [--optimizer adam|sgd] [--lr LR] [--json FILE]

Needs ``lightning`` (or ``pytorch-lightning``): ``pip install -e '.[baselines]'``; without
it the script says so in one line and exits 0. With ``--strategy ddp`` Lightning re-runs this
script once per extra rank; with ``ddp_spawn`` it spawns them. Prints one JSON line: wall
seconds from process start to the end, training seconds of each epoch on rank 0 (first
batch start to last batch end, validation excluded) and the samples/s they give, seconds
from process start to rank 0's first step, torch threads per rank, test accuracy.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

try:
    import lightning as L
except ImportError:
    try:
        import pytorch_lightning as L
    except ImportError:
        print("lightning_ddp: skipped (lightning is not installed; "
              "pip install -e '.[baselines]')")
        sys.exit(0)

import psutil
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import mnist_tensors
from mptrain.models.nets import MnistCNN

# Set by the first process and inherited by the ranks Lightning starts, so that every figure
# counts from the start of the command the user typed.
STARTED_ENV = "BASELINE_STARTED"


class LitMnist(L.LightningModule):
    def __init__(self, data_dir, batch_size, optimizer, lr, momentum):
        super().__init__()
        self.data_dir, self.batch_size = data_dir, batch_size
        self.optimizer_name, self.lr, self.momentum = optimizer, lr, momentum
        self.model = MnistCNN()

    def setup(self, stage):
        self.train_x, self.train_y, self.test_x, self.test_y = mnist_tensors.load(self.data_dir)

    def train_dataloader(self):
        return DataLoader(TensorDataset(self.train_x, self.train_y),
                          batch_size=self.batch_size, shuffle=True, num_workers=0)

    def val_dataloader(self):
        return DataLoader(TensorDataset(self.test_x, self.test_y), batch_size=1000)

    def training_step(self, batch, batch_idx):
        data, target = batch
        return F.nll_loss(self.model(data), target)

    def validation_step(self, batch, batch_idx):
        data, target = batch
        correct = (self.model(data).argmax(1) == target).float().mean()
        self.log("val_acc", correct, sync_dist=True, batch_size=len(target))

    def configure_optimizers(self):
        if self.optimizer_name == "adam":
            return torch.optim.Adam(self.parameters(), lr=self.lr)
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=self.momentum)


class Timings(L.Callback):
    """Rank 0's epoch times, first step and accuracy, written to ``path`` after fitting
    (under ddp_spawn rank 0 is not the process that prints the result)."""

    def __init__(self, path):
        self.path = path
        self.first_step = None
        self.epochs = []

    def on_train_epoch_start(self, trainer, pl_module):
        self.epoch_started = self.last_batch_end = time.monotonic()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if self.first_step is None:
            self.first_step = time.time()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.last_batch_end = time.monotonic()

    def on_validation_end(self, trainer, pl_module):
        if trainer.sanity_checking:
            return
        epoch_s = self.last_batch_end - self.epoch_started
        samples = len(trainer.train_dataloader.sampler) * trainer.world_size
        self.epochs.append({"epoch": len(self.epochs) + 1, "epoch_s": epoch_s,
                            "samples_per_s": samples / epoch_s,
                            "test_accuracy": float(trainer.callback_metrics["val_acc"])})

    def on_fit_end(self, trainer, pl_module):
        if trainer.is_global_zero:
            with open(self.path, "w") as handle:
                json.dump({"epochs": self.epochs, "first_step": self.first_step,
                           "threads": torch.get_num_threads()}, handle)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    mnist_tensors.add_training_arguments(parser)
    parser.add_argument("--strategy", default="ddp", choices=("ddp", "ddp_spawn"))
    args = mnist_tensors.parse_training_arguments(parser)
    os.environ.setdefault(STARTED_ENV, str(psutil.Process().create_time()))
    started = float(os.environ[STARTED_ENV])

    L.seed_everything(args.seed, verbose=False)
    model = LitMnist(mnist_tensors.data_dir(args.data_dir), args.batch_size, args.optimizer,
                     args.lr, args.momentum)
    # One path for all ranks: the ranks that Lightning re-runs this script for inherit it.
    os.environ.setdefault("BASELINE_TIMINGS", os.path.join(
        tempfile.gettempdir(), f"lightning_ddp_{os.getpid()}.json"))
    timings_path = os.environ["BASELINE_TIMINGS"]
    trainer = L.Trainer(accelerator="cpu", devices=args.workers, strategy=args.strategy,
                        max_epochs=args.epochs, enable_progress_bar=False, logger=False,
                        enable_checkpointing=False, callbacks=[Timings(timings_path)])
    trainer.fit(model)
    if not trainer.is_global_zero:
        return
    with open(timings_path) as handle:
        rank0 = json.load(handle)
    os.remove(timings_path)
    epochs = rank0["epochs"]
    train_s = sum(e["epoch_s"] for e in epochs)
    mnist_tensors.emit({
        "baseline": "lightning_ddp", "strategy": args.strategy, "workers": args.workers,
        "threads_per_worker": rank0["threads"], "epochs": args.epochs,
        "batch_size": args.batch_size, "optimizer": args.optimizer, "lr": args.lr,
        "wall_s": time.time() - started, "epoch_s": train_s / len(epochs),
        "samples_per_s": sum(e["samples_per_s"] * e["epoch_s"] for e in epochs) / train_s,
        "process_start_to_first_step_s": rank0["first_step"] - started,
        "accuracy": [e["test_accuracy"] for e in epochs], "per_epoch": epochs,
        "lightning": L.__version__, "torch": torch.__version__}, args.json)


if __name__ == "__main__":
    main()
