"""The same FedAvg workload as plain_fedavg.py written for Flower's simulation engine (Ray),
with the Message API of Flower's PyTorch quickstart: a ClientApp whose ``train`` loads the
global weights into the classic MNIST CNN, trains its IID partition with a fresh SGD
optimizer (a DataLoader over a ``Subset`` of a TensorDataset, shuffled batches) and replies
with its weights and ``num-examples``; a ServerApp that runs ``FedAvg`` (fraction_train =
clients per round / clients, no federated evaluation) with a centralized ``evaluate_fn`` on
the 10k test set every round; ``flwr.simulation.run_simulation`` with one virtual SuperNode
per client.

    python benchmarks/baselines/flower_fedavg.py [--data-dir DIR] [--clients 100]
        [--clients-per-round 10] [--rounds 20] [--local-epochs 1] [--batch-size 32]
        [--lr 0.05] [--seed 0] [--num-cpus 1] [--json FILE]

Needs ``flwr[simulation]``; without it the script says so in one line and exits 0. Each
client gets ``--num-cpus`` Ray CPUs (Flower's default is 2, which on a 2-core machine runs
one client at a time; 1 runs two at once, each with one torch thread, as Ray sets
OMP_NUM_THREADS to the actor's CPUs). Each Ray actor reads MNIST once and keeps it.
Prints one JSON line: wall seconds from process start to the end, seconds from process
start to the end of round 1 (its evaluation included), test accuracy after every round,
the final accuracy, torch version, threads of the server and of the clients.
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import time

try:
    from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp
    from flwr.serverapp.strategy import FedAvg
    from flwr.simulation import run_simulation
    import ray  # noqa: F401  (the simulation extra)
except ImportError:
    print("flower_fedavg: skipped (flwr[simulation] is not installed; "
          "pip install 'flwr[simulation]')")
    sys.exit(0)

import psutil
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Subset, TensorDataset

import mnist_tensors
from mptrain.models.nets import MnistCNN

# One copy per Ray actor process: the actors live for the whole simulation and run many
# clients each, so every client after an actor's first finds its data here.
_DATA: dict = {}


def client_data(data_dir: str, clients: int, seed: int):
    """The training set and the IID partition, the same as plain_fedavg.py's."""
    key = (data_dir, clients, seed)
    if key not in _DATA:
        train_x, train_y, _, _ = mnist_tensors.load(data_dir)
        order = torch.randperm(len(train_x), generator=torch.Generator().manual_seed(seed))
        size = len(train_x) // clients
        parts = [order[i * size:(i + 1) * size].tolist() for i in range(clients)]
        _DATA.clear()
        _DATA[key] = (TensorDataset(train_x, train_y), parts)
    return _DATA[key]


client_app = ClientApp()


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    config = msg.content["config"]
    dataset, parts = client_data(config["data-dir"], int(context.node_config["num-partitions"]),
                                 int(config["seed"]))
    indices = parts[int(context.node_config["partition-id"])]
    model = MnistCNN()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    optimizer = torch.optim.SGD(model.parameters(), lr=float(config["lr"]))
    loader = DataLoader(Subset(dataset, indices), batch_size=int(config["batch-size"]),
                        shuffle=True)
    model.train()
    losses = []
    for _ in range(int(config["local-epochs"])):
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.nll_loss(model(x), y)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    metrics = MetricRecord({"train_loss": sum(losses) / len(losses),
                            "num-examples": len(indices),
                            "threads": torch.get_num_threads()})
    content = RecordDict({"arrays": ArrayRecord(model.state_dict()), "metrics": metrics})
    return Message(content=content, reply_to=msg)


def make_server_app(args, started: float, record: dict) -> ServerApp:
    """The ServerApp runs in a thread of this process, so ``record`` collects its figures."""
    server_app = ServerApp()
    _, _, test_x, test_y = mnist_tensors.load(args.data_dir)

    def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        model = MnistCNN()
        model.load_state_dict(arrays.to_torch_state_dict())
        accuracy = mnist_tensors.accuracy(model, test_x, test_y, batch_size=1000)
        if server_round > 0:  # Flower evaluates the initial weights as round 0
            record["accuracy"].append(accuracy)
            if server_round == 1:
                record["first_round_s"] = time.time() - started
        return MetricRecord({"accuracy": accuracy})

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        torch.manual_seed(args.seed)
        strategy = FedAvg(fraction_train=args.clients_per_round / args.clients,
                          fraction_evaluate=0.0, min_available_nodes=args.clients)
        result = strategy.start(
            grid=grid, initial_arrays=ArrayRecord(MnistCNN().state_dict()),
            num_rounds=args.rounds,
            train_config=ConfigRecord({"lr": args.lr, "batch-size": args.batch_size,
                                       "local-epochs": args.local_epochs, "seed": args.seed,
                                       "data-dir": args.data_dir}),
            evaluate_fn=evaluate)
        # FedAvg averages every metric over the clients, weighted by num-examples.
        record["client_threads"] = sorted({round(float(m["threads"]), 2) for m in
                                           result.train_metrics_clientapp.values()})

    return server_app


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--clients-per-round", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--local-epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-cpus", type=float, default=1,
                        help="Ray CPUs per client (Flower's default: 2)")
    parser.add_argument("--json")
    args = parser.parse_args()
    if not 0 < args.clients_per_round <= args.clients:
        parser.error("--clients-per-round must be between 1 and --clients")
    started = psutil.Process().create_time()
    args.data_dir = mnist_tensors.data_dir(args.data_dir)
    random.seed(args.seed)  # FedAvg samples the round's nodes with Python's random

    record = {"accuracy": [], "first_round_s": None, "client_threads": None}
    run_simulation(server_app=make_server_app(args, started, record), client_app=client_app,
                   num_supernodes=args.clients,
                   backend_config={"client_resources": {"num_cpus": args.num_cpus,
                                                        "num_gpus": 0.0},
                                   "init_args": {"logging_level": logging.ERROR}})
    if len(record["accuracy"]) != args.rounds:
        sys.exit(f"flower_fedavg: the simulation ended after {len(record['accuracy'])} of "
                 f"{args.rounds} rounds (see Flower's log above)")

    mnist_tensors.emit({
        "baseline": "flower_fedavg", "flwr": _flwr_version(), "clients": args.clients,
        "clients_per_round": args.clients_per_round, "rounds": args.rounds,
        "local_epochs": args.local_epochs, "batch_size": args.batch_size, "lr": args.lr,
        "seed": args.seed, "num_cpus_per_client": args.num_cpus,
        "wall_s": time.time() - started, "first_round_s": record["first_round_s"],
        "accuracy": record["accuracy"], "final_accuracy": record["accuracy"][-1],
        "torch": torch.__version__, "threads": torch.get_num_threads(),
        "client_threads": record["client_threads"]}, args.json)


def _flwr_version() -> str:
    from importlib.metadata import version

    return version("flwr")


if __name__ == "__main__":
    main()
