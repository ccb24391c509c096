"""``mptrain run``: flags and config file in, one training run through ``fit``."""

from __future__ import annotations

from pathlib import Path

import click

from ..config import OPTIMIZERS, STRATEGIES, TrainConfig, load_config_file
from ..launch.lifecycle import leave
from ..launch.world import detect_external_world
from .app import cli

RUN_FLAGS = ("data", "data_dir", "model", "out")


@cli.command()
@click.option("--data", help="digits (default), linreg, mnist, or module:factory.")
@click.option("--data-dir", help="Folder with the MNIST IDX files (for --data mnist).")
@click.option("--model", help="digits-cnn, mnist-cnn, linear, mlp, or module:factory "
                              "(default: the data set's own).")
@click.option("--strategy", type=click.Choice(STRATEGIES), help="How work is split (single).")
@click.option("--workers", type=int, help="Worker processes (default 2 for parallel strategies).")
@click.option("--epochs", type=int, help="Passes over the training set.")
@click.option("--batch-size", type=int, help="Samples per step and worker.")
@click.option("--lr", type=float, help="Learning rate.")
@click.option("--momentum", type=float, help="SGD momentum (Adam: beta1).")
@click.option("--optimizer", type=click.Choice(OPTIMIZERS), help="sgd or adam.")
@click.option("--lr-decay", type=float,
              help="Multiply the learning rate by this after every epoch (1: constant).")
@click.option("--lr-schedule", type=click.Choice(("step", "cosine")),
              help="step: constant within an epoch; cosine: annealed to 0 within each epoch.")
@click.option("--weight-decay", type=float, help="L2 penalty (default 0).")
@click.option("--seed", type=int, help="Seed for initialisation and shuffling (default 0).")
@click.option("--threads-per-worker", type=int,
              help="torch threads per worker (default: usable cores // workers).")
@click.option("--sync-every", type=int, help="sync: average parameters every N steps "
                                             "(default: the data set's, else once per epoch).")
@click.option("--share-optimizer-state/--no-share-optimizer-state", default=None,
              help="hogwild: one optimizer state in shared memory for all workers.")
@click.option("--ddp-backend", type=click.Choice(("auto", "shm", "gloo", "nccl")),
              help="ddp: how gradients are averaged (auto: shared memory on one CPU machine).")
@click.option("--device", type=click.Choice(("cpu", "cuda")), help="Where to train (cpu).")
@click.option("--start-method", type=click.Choice(("fork", "spawn", "forkserver")),
              help="Override the automatic choice (fork on CPU/Linux, spawn with CUDA).")
@click.option("--steps-per-epoch", type=int,
              help="Cut every epoch after N steps per worker (quick looks).")
@click.option("--worker-timeout", type=float,
              help="Seconds without progress before a worker counts as hung (300).")
@click.option("--sharing-strategy", type=click.Choice(("auto", "file_descriptor", "file_system")),
              help="How tensors are shared between processes (auto: from the open-file "
                   "limit).")
@click.option("--checkpoint-every", type=int,
              help="Write an atomic checkpoint to --out every N epochs (and at the end).")
@click.option("--resume", type=click.Path(),
              help="Continue the run whose --out folder (or checkpoint file) this is.")
@click.option("--max-restarts", type=int,
              help="Restart failed workers from the last checkpoint up to N times (0).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False),
              help="TOML file with any of these options; flags override it.")
@click.option("--out", help="Write summary.json, metrics.jsonl, model.pt, curves.png here.")
@click.option("--quiet", "-q", is_flag=True, default=None, help="Print nothing but errors.")
def run(config_file, resume, **flags):
    """Train a model; with no options, a CNN on the embedded handwritten digits."""
    from ..api import train_bundle
    from ..checkpoint import load as load_checkpoint
    from ..launch import warmup

    warmup.start_in_background()
    from ..data.sources import load_data
    from ..models import build_model

    checkpoint = load_checkpoint(resume) if resume else None
    # Precedence: checkpoint < config file < flags (the data set's defaults fill the rest).
    settings = _resumed_settings(checkpoint, resume) if checkpoint else {}
    settings.update(load_config_file(config_file) if config_file else {})
    settings.update({k: v for k, v in flags.items() if v is not None})
    locations = {k: settings.pop(k, None) for k in RUN_FLAGS}
    config = TrainConfig(**settings)
    bundle = load_data(locations["data"] or "digits", locations["data_dir"])
    model_name = locations["model"] or bundle.default_model
    model = build_model(model_name, bundle.input_shape, bundle.output_size, config.seed)
    run_info = {"data": bundle.name if locations["data"] is None else locations["data"],
                "data_dir": locations["data_dir"], "model": model_name}
    train_bundle(config, bundle, model, model_name, out=locations["out"], resume=checkpoint,
                 run_info=run_info)
    if detect_external_world() is not None:
        # gloo's teardown aborts now and then after the work is done; torchrun would
        # report that finished rank as failed.
        leave(0)


def _resumed_settings(checkpoint, resume_path) -> dict:
    settings = {k: v for k, v in checkpoint.config.items()
                if k not in ("extra", "quiet") and v is not None}
    settings.update({k: v for k, v in checkpoint.run.items() if v is not None})
    if "data_dir" in settings and settings.get("data") != "mnist":
        settings.pop("data_dir")
    settings["out"] = str(resume_path if Path(resume_path).is_dir()
                          else Path(resume_path).parent)
    return settings


