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
@click.option("--partition",
              help=PARTITION_HELP + "  [default: natural for data with client ids, else iid]")
@click.option("--client-column", help="--data hf:NAME: the column naming each sample's client.")
@click.option("--features", help="--data hf:NAME: the input column.")
@click.option("--label", help="--data hf:NAME: the label column.")
@click.option("--seed", type=click.IntRange(0, MAX_SEED), default=0, show_default=True,
              help="Same seed, same partition.")
@click.option("--out", help="Write partitions.png (label mix per client) here.")
def partitions(data, data_dir, clients, partition, client_column, features, label, seed, out):
    """Show how --partition splits the training set among --clients: samples and distinct
    labels per client (min / median / max) and how heterogeneous the clients are (the
    Hellinger distance of each client's label mix to the pooled one, the Gini coefficient
    of their sizes), without training.

    \b
    Partitions:
      natural                one client per id the data carries (leaf:DIR,
                             hf:NAME, synthetic:A,B); their default
      iid                    random, sizes differ by at most one
      dirichlet:ALPHA        label skew: each class spread over the clients by
                             Dirichlet(ALPHA) proportions; smaller ALPHA, more
                             skew (0.1 strong, 1 mild, 100 nearly iid)
      dirichlet:ALPHA:MIN    the same, and every client gets at least MIN
                             samples (default: a tenth of samples/clients,
                             1 to 10)
      shards:K               sort by label, cut into clients x K shards, K per
                             client: about K labels each (McMahan et al. 2017)
      pathological:K         K classes drawn per client, each class's samples
                             shared by the clients that drew it
      inner-dirichlet:ALPHA  equal sizes, each client's label mix drawn from
                             Dirichlet(ALPHA)
      linear, square,        client i of n holds a share i, i^2 or e^i of the
      exponential[:MIN]      samples; MIN: each client at least MIN
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
        --drop-stragglers                        FedAvg loses stragglers' work
      --client-speeds lognormal                  a virtual clock: virtual_time_s
        --round-deadline S, --over-select F,     per round; late clients dropped
        --availability-trace FILE
      --eval-train                               loss over the whole training set
      --dp-clip C --dp-noise Z --sampling poisson  DP-FedAvg; epsilon at
        --dp-delta D by --accountant rdp|pld, --target-epsilon E stops first
      --client-eval-every N                      per-client accuracy (own test
                                                 split where clients have one):
                                                 means, 10th pct, worst
    """
    import torch
    from rich.console import Console
    from rich.table import Table

    from ..data.partitions import cut_training_set, parse_partition
    from ..data.sources import CLASSIFICATION, is_natural, load_data
    from ..errors import UserError
    from ..errors import setting_name as named
    from ..report.outputs import prepare_out_dir
    from ..report.partitions import (heterogeneity_line, heterogeneity_rows,
                                     partition_heterogeneity, partition_stats, plot_label_mix,
                                     stats_rows)

    if partition is None:
        partition = "natural" if is_natural(data) else "iid"
    spec = parse_partition(partition)  # a typo fails before the data set is loaded
    out_dir = prepare_out_dir(out) if out else None
    bundle = load_data(data, data_dir, clients=clients if spec.kind == "natural" else None,
                       seed=seed, client_column=client_column, features=features,
                       label=label)
    if clients is None:   # the data set's federated recipe, as mptrain run's
        clients = bundle.defaults.federated["clients"]
    if getattr(bundle.train, "on_demand", False):
        raise UserError(f"{data} with {clients:,} devices is generated on demand, a device "
                        "at a time: its label mix would draw every device; ask for fewer "
                        f"{named('clients')}")
    targets = bundle.train.targets
    index, offsets = cut_training_set(spec, bundle, clients, seed)
    parts = list(torch.split(index, (offsets[1:] - offsets[:-1]).tolist()))
    classes = bundle.output_size if bundle.task == CLASSIFICATION else None
    stats = partition_stats(parts, targets if classes else None)
    spread = partition_heterogeneity(index, offsets, targets, classes)

    table = Table(title=None)
    table.add_column("")
    for name in ("min", "median", "max"):
        table.add_column(name, justify="right")
    for row in stats_rows(stats):
        table.add_row(*row)
    for row in heterogeneity_rows(spread):
        table.add_row(*row)
    console = Console(highlight=False, soft_wrap=True,
                      width=None if sys.stdout.isatty() else 180)
    console.print(table)
    covered = sum(len(part) for part in parts)
    console.print(f"data {bundle.name} ({len(targets):,} training samples, {covered:,} "
                  f"assigned) · {clients} clients · partition {spec} · seed {seed}")
    console.print(heterogeneity_line(spread), markup=False)
    columns = [(f"--{k.replace('_', '-')}", v) for k, v in
               (("client_column", client_column), ("features", features), ("label", label))
               if v is not None]
    command = ["mptrain", "run", "--strategy", "fedavg", "--data", data,
               *(["--data-dir", data_dir] if data_dir else []),
               *[word for pair in columns for word in pair], "--clients", str(clients),
               "--partition", partition, "--seed", str(seed)]
    if out_dir is not None:
        path = out_dir / "partitions.png"
        plot_label_mix(path, parts, targets, classes)
        console.print(f"wrote {path}")
    console.print(f"train on it: {shlex.join(command)}", markup=False)
