"""``mptrain partitions``: how ``--partition`` splits a data set among federated clients."""

from __future__ import annotations

import shlex
import sys

import click

from ..config import MAX_SEED, PARTITION_HELP
from .app import cli


@cli.command()
@click.option("--data", default="digits", show_default=True,
              help="Any data set `mptrain run` accepts.")
@click.option("--data-dir", help="Folder with the MNIST IDX files (for --data mnist).")
@click.option("--clients", type=int,
              help="Number of simulated clients  [default: what `mptrain run --strategy "
                   "fedavg` takes for the data set: 20 for digits, 8 for linreg, 100 "
                   "otherwise]")
@click.option("--partition", default="iid", show_default=True, help=PARTITION_HELP)
@click.option("--seed", type=click.IntRange(0, MAX_SEED), default=0, show_default=True,
              help="Same seed, same partition.")
@click.option("--out", help="Write partitions.png (label mix per client) here.")
def partitions(data, data_dir, clients, partition, seed, out):
    """Show how --partition splits the training set among --clients: samples and distinct
    labels per client (min / median / max), without training.

    \b
    Partitions:
      iid                    random, sizes differ by at most one
      dirichlet:ALPHA        label skew: each class spread over the clients by
                             Dirichlet(ALPHA) proportions; smaller ALPHA, more
                             skew (0.1 strong, 1 mild, 100 nearly iid)
      dirichlet:ALPHA:MIN    the same, and every client gets at least MIN
                             samples (default: a tenth of samples/clients,
                             1 to 10)
      shards:K               sort by label, cut into clients x K shards, K per
                             client: about K labels each (McMahan et al. 2017)
      pkg.mod:function       your function(targets, clients, seed), returning
      path/file.py:function  one list of sample indices per client

    \b
    Train on them: mptrain run --strategy fedavg --clients N --partition P, with
    the federated workbench one flag away (docs/federated.md):
      --clients-per-round K, --local-epochs E    FedAvg (McMahan et al. 2017)
      --prox-mu MU                               FedProx
      --server-optimizer adam|yogi|adagrad       FedAdam, FedYogi, FedAdagrad
        --server-lr, --server-tau, --server-betas B1,B2
      --server-momentum M                        FedAvgM (server sgd)
      --scaffold                                 SCAFFOLD, option II variates
      --dropout-rate P, --straggler-rate P       unreliable clients
      --dp-clip C --dp-noise Z --sampling poisson  DP-FedAvg; epsilon at
        --dp-delta D by --accountant rdp|pld, --target-epsilon E stops first
      --client-eval-every N                      per-client accuracy: mean,
                                                 std, 10th pct, worst
    """
    from rich.console import Console
    from rich.table import Table

    from ..data.partitions import parse_partition, partition_clients
    from ..data.sources import CLASSIFICATION, load_data
    from ..report.outputs import prepare_out_dir
    from ..report.partitions import partition_stats, plot_label_mix, stats_rows

    spec = parse_partition(partition)  # a typo fails before the data set is loaded
    out_dir = prepare_out_dir(out) if out else None
    bundle = load_data(data, data_dir, seed)   # your factory's data as a run's of this seed
    if clients is None:   # the data set's federated recipe, as mptrain run's
        clients = bundle.defaults.federated["clients"]
    targets = bundle.train.targets
    parts = partition_clients(spec, targets, clients, seed)
    classes = bundle.output_size if bundle.task == CLASSIFICATION else None
    stats = partition_stats(parts, targets if classes else None)

    table = Table(title=None)
    table.add_column("")
    for name in ("min", "median", "max"):
        table.add_column(name, justify="right")
    for row in stats_rows(stats):
        table.add_row(*row)
    console = Console(highlight=False, soft_wrap=True,
                      width=None if sys.stdout.isatty() else 180)
    console.print(table)
    covered = sum(len(part) for part in parts)
    console.print(f"data {bundle.name} ({len(targets):,} training samples, {covered:,} "
                  f"assigned) · {clients} clients · partition {spec} · seed {seed}")
    command = ["mptrain", "run", "--strategy", "fedavg", "--data", data,
               *(["--data-dir", data_dir] if data_dir else []), "--clients", str(clients),
               "--partition", partition, "--seed", str(seed)]
    if out_dir is not None:
        path = out_dir / "partitions.png"
        plot_label_mix(path, parts, targets, classes)
        console.print(f"wrote {path}")
    console.print(f"train on it: {shlex.join(command)}", markup=False)
