"""``mptrain run``: flags and config file in, one training run through ``fit``."""

from __future__ import annotations


import click

from ..config import (ACCOUNTANTS, CLIENT_SAMPLING, DDP_BACKENDS, DEVICES, LR_SCHEDULES,
                      ONCE_PER_EPOCH, OPTIMIZERS, PRECISIONS, SERVER_OPTIMIZERS,
                      SHARING_STRATEGIES, PARTITION_HELP, START_METHODS, STRAGGLER_MODES,
                      VECTORIZE_CLIENTS, load_config_file)
from ..federated.asynchronous.staleness import STALENESS_HELP
from ..federated.robust.spec import AGGREGATOR_HELP, ATTACK_HELP
from ..settings import DATA_COLUMNS, RUN_LOCATIONS
from ..settings import config_file as config_file_layer
from ..settings import flags as flags_layer
from ..data.recipes import RECIPES
from .defaults_help import default_text
from ..strategies.registry import STRATEGIES
from .app import Choice, NonEmptyValues, cli, joined_loggers, supervised_run_options

#: Options that say where things are and who is told, not how to train: a resumed run may
#: change them, and a checkpoint does not keep them as settings.
NOT_SETTINGS = frozenset(RUN_LOCATIONS) | {"logger", "tb_dir"}


class StepsOrEpoch(click.ParamType):
    """A number of steps, or ``epoch``."""

    name = "N|epoch"

    def convert(self, value, param, ctx):
        if value == ONCE_PER_EPOCH or isinstance(value, int):
            return value
        try:
            return int(value)
        except ValueError:
            self.fail(f"{value!r} is neither a number of steps nor '{ONCE_PER_EPOCH}'", param,
                      ctx)


class Betas(click.ParamType):
    """``B1,B2``: checked by the config, so a config file and a flag say the same."""

    name = "B1,B2"

    def convert(self, value, param, ctx):
        return value


class GroupedHelp(NonEmptyValues):
    """``--help`` with fedavg's many options in a section of their own."""

    def format_options(self, ctx, formatter):
        general, federated = [], []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            federal = (param.help or "").startswith(("fedavg", "fedbuff"))
            (federated if federal else general).append(record)
        with formatter.section("Options"):
            formatter.write_dl(general)
        with formatter.section("Federated options (--strategy fedavg, fedbuff)"):
            formatter.write_dl(federated)


@cli.command(cls=GroupedHelp)
@click.option("--data", help=f"{', '.join(RECIPES)} (default digits); natural clients: "
                             "leaf:DIR (LEAF's train/ and test/ JSON), hf:NAME (a Hugging "
                             "Face data set or save_to_disk folder; pip install "
                             "'mptrain[hf]'), synthetic:ALPHA,BETA or synthetic-iid "
                             "(FedProx's); or module:factory "
                             "(or file.py:factory), a function of no arguments returning "
                             "(train_set, test_set or None).")
@click.option("--data-dir", help="Folder with the MNIST IDX files (for --data mnist).")
@click.option("--client-column",
              help="--data hf:NAME: the column naming each sample's client (flwrlabs/femnist: "
                   "writer_id, flwrlabs/shakespeare: character_id).")
@click.option("--features", help="--data hf:NAME: the input column (image, x, ...).")
@click.option("--label", help="--data hf:NAME: the label column (character, y, label, ...).")
@click.option("--model", help="digits-cnn, mnist-cnn, mnist-2nn, mnist-cnn-fedavg, linear, mlp, "
                              "leaf-femnist-cnn, leaf-shakespeare-lstm, mclr, resnet18-gn, "
                              "or module:factory, a function of no arguments returning an "
                              "nn.Module (default: the data set's own).")
@click.option("--data-dtype", type=Choice(("auto", "uint8", "float32")),
              help="Images in shared memory: uint8 (a quarter of the memory, decoded per "
                   "batch in the workers; auto: where the source gives uint8 pixels, "
                   "--data mnist) or float32.")
@click.option("--collate", metavar="pad|MODULE:FN",
              help="Samples of different lengths (1-D token sequences): pad (each batch "
                   "padded to its longest, the model given (tokens, mask)) or a function "
                   "fn(sequences, targets) -> (inputs, targets).")
@click.option("--loader", type=Choice(("stacked", "stream", "auto")),
              help="stacked: the data read once and held in shared memory; stream: each "
                   "worker reads its shard where it lies (a memory-mapped file stays on "
                   "disk), a few batches ahead; auto (default): stacked unless that would "
                   "not fit in /dev/shm.")
@click.option("--loader-workers", type=int,
              help="--loader stream: loader threads per worker, counted in its thread "
                   "budget (default 1: reads one at a time, safe for any data set; more read "
                   "in parallel, for a thread-safe set; 0: read in the training thread).")
@click.option("--drop-last/--no-drop-last", default=None,
              help="sync, ddp: cut each epoch's shuffled order to a multiple of the workers "
                   "(DistributedSampler's drop_last) instead of padding it by repeating "
                   "samples so that every rank has as many.")
@click.option("--augment", metavar="OPS",
              help="Augment each training batch in the workers, drawn afresh per batch: "
                   "crop:PAD, hflip, shift:PX, comma-separated (image data only).")
@click.option("--transform", metavar="MODULE:FN",
              help="A function fn(inputs, targets, generator) -> (inputs, targets) applied "
                   "to each training batch in the workers, on their device (after --augment).")
@click.option("--strategy", type=Choice(STRATEGIES), help="How work is split (single).")
@click.option("--workers", type=int,
              help="Worker processes (default 2 for parallel strategies; dp: GPUs, default "
                   "all visible).")
@click.option("--epochs", type=int,
              help=f"Passes over the training set ({default_text('epochs')}).")
@click.option("--batch-size", type=int,
              help=f"Samples per step and worker ({default_text('batch_size')}; fedavg "
                   f"{default_text('batch_size', True)}).")
@click.option("--lr", type=float,
              help=f"Learning rate ({default_text('lr')}; fedavg {default_text('lr', True)}).")
@click.option("--momentum", type=float,
              help=f"SGD momentum; Adam's beta1 ({default_text('momentum')}; fedavg "
                   f"{default_text('momentum', True)}).")
@click.option("--optimizer", type=Choice(OPTIMIZERS),
              help=f"sgd or adam ({default_text('optimizer')}; fedavg "
                   f"{default_text('optimizer', True)}).")
@click.option("--lr-decay", type=float,
              help="Multiply the learning rate by this after every epoch (1: constant).")
@click.option("--lr-schedule", type=Choice(LR_SCHEDULES),
              help="step: constant within an epoch; cosine: annealed to 0 within each epoch "
                   "(epochs' strategies; fedavg's and fedbuff's rounds: --lr-decay).")
@click.option("--weight-decay", type=float, help="L2 penalty (default 0).")
@click.option("--seed", type=int, help="Seed for initialisation and shuffling (default 0).")
@click.option("--threads-per-worker", type=int,
              help="torch threads per worker (default: usable cores // workers).")
@click.option("--sync-every", type=StepsOrEpoch(),
              help=f"sync: average parameters every N steps, or 'epoch' for once per epoch "
                   f"({default_text('sync_every')}).")
@click.option("--share-optimizer-state/--no-share-optimizer-state", default=None,
              help="hogwild: one optimizer state in shared memory for all workers.")
@click.option("--ddp-backend", type=Choice(DDP_BACKENDS),
              help="ddp: how gradients are averaged (auto: shared memory on one CPU machine).")
@click.option("--device", type=Choice(DEVICES), help="Where to train (cpu).")
@click.option("--precision", type=Choice(PRECISIONS),
              help="32: float32 throughout (default); bf16: forward passes in bfloat16 "
                   "under autocast, parameters and gradients float32 (fast on GPUs from "
                   "Ampere on and CPUs with AVX512-BF16/AMX, emulated and slower elsewhere).")
@click.option("--compile", is_flag=True, default=None,
              help="Each worker's model under torch.compile (on a GPU with CUDA graphs where "
                   "the strategy allows); one worker compiles first, the others read its "
                   "cache. Needs a C++ compiler on CPU, Triton on a GPU.")
@click.option("--start-method", type=Choice(START_METHODS),
              help="Override the automatic choice (fork on CPU/Linux, spawn with CUDA).")
@click.option("--steps-per-epoch", type=int,
              help="Cut every epoch after N steps per worker (quick looks; hogwild: N x workers "
                   "batches in all, taken as the workers come).")
@click.option("--sharing-strategy", type=Choice(SHARING_STRATEGIES),
              help="How tensors are shared between processes (auto: from the open-file "
                   "limit).")
@click.option("--eval-every", type=int,
              help="Evaluate on the test set every N epochs/rounds and at the end (1).")
@click.option("--eval-batch-size", type=int,
              help="Samples per evaluation batch (64; larger is faster where memory allows).")
@click.option("--target-accuracy", type=float,
              help="Stop at the first evaluation whose test accuracy reaches this (0-1).")
@click.option("--rounds", type=int,
              help=f"fedavg: rounds of federated training ({default_text('rounds', True)}).")
@click.option("--clients", type=int,
              help=f"fedavg: simulated clients ({default_text('clients', True)}).")
@click.option("--clients-per-round", type=int,
              help=f"fedavg: clients sampled each round "
                   f"({default_text('clients_per_round', True)}).")
@click.option("--client-fraction", type=float,
              help="fedavg: fraction of the clients sampled each round (instead of a count).")
@click.option("--local-epochs", type=int,
              help=f"fedavg: epochs each client trains per round "
                   f"({default_text('local_epochs', True)}).")
@click.option("--partition", help="fedavg: " + PARTITION_HELP)
@click.option("--prox-mu", type=float, help="fedavg: FedProx proximal term (0: plain FedAvg).")
@click.option("--server-optimizer", "--server-opt", "server_optimizer",
              type=Choice(SERVER_OPTIMIZERS),
              help="fedavg: the server's optimizer of the averaged update (Reddi et al. "
                   "2021): sgd (FedAvg, FedAvgM), adam, yogi, adagrad.")
@click.option("--server-lr", type=float,
              help="fedavg: server learning rate (sgd 1, adam/yogi 0.01, adagrad 0.1).")
@click.option("--server-momentum", type=float, help="fedavg: server momentum, FedAvgM (0).")
@click.option("--server-betas", type=Betas(),
              help="fedavg: adam/yogi/adagrad moments' decay B1,B2 (0.9,0.99).")
@click.option("--server-tau", type=float,
              help="fedavg: adam/yogi/adagrad adaptivity tau (1e-3).")
@click.option("--scaffold/--no-scaffold", default=None,
              help="fedavg: SCAFFOLD control variates (Karimireddy et al. 2020, option II).")
@click.option("--sampling", type=Choice(CLIENT_SAMPLING),
              help="fedavg: fixed-size uniform sample per round, or Poisson (each client "
                   "joins with q = clients-per-round / clients; needed by DP).")
@click.option("--dropout-rate", type=float,
              help="fedavg: fraction of sampled clients that train but never report (0).")
@click.option("--straggler-rate", type=float,
              help="fedavg: fraction of sampled clients doing a random part of their local "
                   "steps (0).")
@click.option("--straggler-mode", type=Choice(STRAGGLER_MODES),
              help="fedavg: per-client (each sampled client straggles with probability P, "
                   "doing 1 to all-but-one of its local steps) or exact (FedProx's code: "
                   "round(K x P) of the round's K clients straggle, each doing 1 to E-1 "
                   "whole local epochs)  [default: per-client]")
@click.option("--drop-stragglers/--no-drop-stragglers", default=None,
              help="fedavg: throw away the stragglers' partial work (FedAvg as FedProx's "
                   "paper runs it) instead of aggregating it (FedProx).")
@click.option("--accept-failures/--no-accept-failures", default=None,
              help="fedavg: drop a client that raises from its round instead of stopping.")
@click.option("--dp-clip", type=float,
              help="fedavg: clip each client's update to this L2 norm.")
@click.option("--dp-noise", type=float,
              help="fedavg: DP-FedAvg noise multiplier z (Gaussian std z * clip on the sum).")
@click.option("--dp-delta", type=float, help="fedavg: delta of the epsilon reported (1e-5).")
@click.option("--target-epsilon", type=float,
              help="fedavg: stop before the privacy spent would pass this epsilon.")
@click.option("--accountant", type=Choice(ACCOUNTANTS),
              help="fedavg: dp-accounting's RDP (default) or PLD accountant.")
@click.option("--dp-clip-quantile", type=float,
              help="fedavg: adapt the clip to this quantile of update norms (Andrew et al. "
                   "2021).")
@click.option("--dp-clip-lr", type=float, help="fedavg: adaptive clip's step (0.2).")
@click.option("--dp-count-noise", type=float,
              help="fedavg: noise std on adaptive clipping's count (expected clients / 20).")
@click.option("--client-speeds", metavar="SPEC",
              help="fedavg: run on a virtual clock with these client speeds: "
                   "lognormal[:MU,SIGMA] (FedScale's devices, 1,0.6 x 5 ms a sample), "
                   "constant[:MS] or a FedScale client_device_capacity file (JSON/CSV; "
                   "cycle:FILE deals its profiles in turn); virtual_time_s in the metrics.")
@click.option("--availability-trace", metavar="FILE",
              help="fedavg: when each client is online (FedScale's client_behave_trace "
                   "layout, JSON; cycle:FILE deals it in turn); needs --client-speeds.")
@click.option("--round-deadline", type=float, metavar="S",
              help="fedavg: drop the clients that would report after S virtual seconds "
                   "(needs --client-speeds).")
@click.option("--over-select", type=float, metavar="F",
              help="fedavg: sample F x --clients-per-round clients and keep the first "
                   "--clients-per-round to report (Bonawitz et al. 2019; 1).")
@click.option("--eval-train/--no-eval-train", default=None,
              help="fedavg: whenever the test set is scored, score the global model on the "
                   "whole training set too (train_eval_loss, train_eval_accuracy).")
@click.option("--client-eval-every", type=int,
              help="fedavg, fedbuff: every N rounds (server steps) evaluate the global model "
                   "on each client's own test split (pooled data: its training rows): weighted "
                   "and unweighted means, 10th percentile, worst; a row per client in "
                   "client_metrics.jsonl.")
@click.option("--vectorize-clients", type=Choice(VECTORIZE_CLIENTS),
              help="fedavg: train a worker's clients together as stacked model copies: "
                   "auto (where its rule says faster; default), on, off (one at a time).")
@click.option("--vectorize-chunk", type=int,
              help="fedavg: clients per stacked cohort (default: as many as fit memory).")
@click.option("--aggregator", help="fedavg: " + AGGREGATOR_HELP + ".")
@click.option("--malicious-fraction", type=float,
              help="fedavg: fraction of the clients that attack (seeded, fixed for the run; "
                   "0).")
@click.option("--attack", help="fedavg: " + ATTACK_HELP + ".")
@click.option("--personalize",
              help="fedavg, fedbuff: each client's own model, scored on its own test split "
                   "beside the global one: finetune:STEPS (scoring only), fedper:LAYERS, "
                   "fedrep:LAYERS, fedbn, ditto:LAMBDA; LAYERS are module names (fc2,fc1) or "
                   "last:N.")
@click.option("--personal-memory", type=float,
              help="fedavg, fedbuff: MiB of shared memory for the clients' personal state "
                   "(default: half of /dev/shm's free space); the rest goes to a file under "
                   "--out.")
@click.option("--personal-head-epochs", type=int,
              help="fedavg, fedbuff: fedrep's epochs on the head before --local-epochs on the "
                   "body (10, as Collins et al. 2021).")
@click.option("--concurrency", type=int,
              help="fedbuff: clients training at once, K (default: the clients a fedavg round "
                   "would sample).")
@click.option("--buffer-size", type=int,
              help="fedbuff: updates per server step, B <= K (default K // 2, at most 10); "
                   "1 is FedAsync.")
@click.option("--staleness-weight", help="fedbuff: " + STALENESS_HELP + ".")
@click.option("--max-staleness", type=int,
              help="fedbuff: drop updates more than this many server versions old (none).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False),
              help="TOML file with any of these options; flags override it.")
@supervised_run_options("worker", "epochs/rounds")
def run(config_file, resume, **flags):
    """Train a model; with no options, a CNN on the embedded handwritten digits.

    fedavg counts its work in --rounds (not --epochs): each round samples
    --clients-per-round of --clients, each trains --local-epochs on its own data, and the
    server averages them weighted by their sample counts.
    """
    from ..data import idx
    from ..launch import openmp
    from ..trackers import parse_loggers

    flags["logger"] = joined_loggers(flags["logger"])
    file = load_config_file(config_file) if config_file else {}
    given = {**file, **{k: v for k, v in flags.items() if v is not None}}
    where = {k: given.get(k) for k in NOT_SETTINGS}
    loggers = parse_loggers(where["logger"])
    if where["data"] == "mnist" and where["data_dir"]:
        idx.read_ahead(where["data_dir"])  # while torch imports, on the other core
    layers = [config_file_layer(file, leave_out=NOT_SETTINGS) if file else None,
              flags_layer({k: v for k, v in flags.items() if k not in NOT_SETTINGS})]
    # Until its workers start this process only loads the data and builds the model: kept
    # on one thread, it can fork workers that run several (launch.openmp); `single` and
    # torchrun ranks set their own count before they train.
    openmp.keep_this_process_on_one_thread()
    try:
        model, bundle, locations, config, checkpoint, launcher = _prepare(
            [layer for layer in layers if layer is not None], where, resume)
    finally:
        idx.finish_read_ahead()  # no thread may be left running when workers fork
    from ..api import train

    model_name = locations["model"] or bundle.default_model
    source = {"data": bundle.name if locations["data"] is None else locations["data"],
              "data_dir": locations["data_dir"], "model": model_name,
              **{k: locations[k] for k in DATA_COLUMNS if locations[k] is not None}}
    train(config, bundle, model, model_name, launcher, out=locations["out"],
          checkpoint=checkpoint, run_info=source, loggers=loggers, tb_dir=where["tb_dir"])
    launcher.finish()


def _prepare(layers, where: dict, resume):
    """The run's model and data set, where they came from, its config, the checkpoint to
    resume from and the run's launcher -- the settings resolved and refused before any data
    is built."""
    from ..api import launcher_for, resolved_config
    from ..checkpoint import load as load_checkpoint
    from ..checkpoint import user_code_in
    from ..data.recipes import recipe_for
    from ..data.sources import load_data, with_collate, with_data_dtype, with_loader
    from ..launch import warmup
    from ..models import build_model
    from ..settings import run_locations

    warmup.start_in_background()
    checkpoint = load_checkpoint(resume) if resume else None
    if checkpoint is not None:
        user_code_in(checkpoint, {**{k: where[k] for k in ("data", "model")},
                                  **{k: said_setting(layers, k)
                                     for k in ("transform", "collate")}})
    locations = run_locations(where, checkpoint, resume)
    config = resolved_config(layers, checkpoint, recipe_for(locations["data"]), resume)
    said = {k: v for layer in layers for k, v in layer.values.items() if v is not None}
    launcher = launcher_for(config, said)
    bundle = load_data(locations["data"] or "digits", locations["data_dir"],
                       clients=devices_asked(config), seed=config.seed,
                       loader=config.loader, **{k: locations[k] for k in DATA_COLUMNS})
    bundle = with_collate(with_loader(with_data_dtype(bundle, config.data_dtype), config),
                          config.collate)
    if bundle.clients is not None:   # natural data: its recipe knows its clients now
        config = resolved_config(layers, checkpoint, bundle.defaults, resume)
    model = build_model(locations["model"] or bundle.default_model, bundle.input_shape,
                        bundle.output_size, config.seed)
    return model, bundle, locations, config, checkpoint, launcher


def said_setting(layers, name: str) -> str | None:
    """Setting ``name`` as said (flag over config file), for a resume's check that the
    checkpoint's user code is named again."""
    said = [layer.values.get(name) for layer in layers]
    return next((value for value in reversed(said) if value is not None), None)


def devices_asked(config) -> int | None:
    """The devices ``--data synthetic:A,B`` is to make: one per client of a fedavg run that
    trains natural clients (``--clients``, or the recipe's 30); None otherwise."""
    f = config.fedavg
    return f.clients if config.unit == "round" and f.partition == "natural" else None
