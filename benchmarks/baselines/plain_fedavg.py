"""The plain sequential FedAvg loop a researcher writes by hand (McMahan et al. 2017): one
process, one torch thread, the classic MNIST CNN. The data are cut into equal IID client
parts (a seeded permutation); every round the server samples clients without replacement,
each sampled client loads the global weights into a client model, trains them with a fresh
SGD optimizer over its samples (a DataLoader over a ``Subset`` of a TensorDataset, shuffled
batches), and the server averages the clients' state_dicts weighted by their sample counts,
then evaluates on the 10k test set.

    python benchmarks/baselines/plain_fedavg.py [--data-dir DIR] [--clients 100]
        [--clients-per-round 10] [--rounds 20] [--local-epochs 1] [--batch-size 32]
        [--lr 0.05] [--seed 0] [--json FILE]

Prints one JSON line: wall seconds from process start to the end, seconds from process start
to the end of round 1, test accuracy after every round, the final accuracy, per-round
seconds and mean client loss, torch version and threads.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import psutil
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Subset, TensorDataset

import mnist_tensors
from mptrain.models.nets import MnistCNN


def iid_partition(samples: int, clients: int, seed: int) -> list[list[int]]:
    """A seeded permutation cut into ``clients`` equal parts (the remainder is dropped)."""
    order = torch.randperm(samples, generator=torch.Generator().manual_seed(seed))
    size = samples // clients
    return [order[i * size:(i + 1) * size].tolist() for i in range(clients)]


def client_update(model, global_state, dataset, indices, args):
    """One client: start from the global weights, train locally, return its weights."""
    model.load_state_dict(global_state)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    loader = DataLoader(Subset(dataset, indices), batch_size=args.batch_size, shuffle=True)
    model.train()
    losses = []
    for _ in range(args.local_epochs):
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.nll_loss(model(x), y)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    # state_dict() returns views of the parameters, which the next client overwrites.
    state = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
    return state, len(indices), sum(losses) / len(losses)


def weighted_average(states, weights):
    total = sum(weights)
    return {name: sum(state[name] * (weight / total) for state, weight in zip(states, weights))
            for name in states[0]}


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
    parser.add_argument("--json")
    args = parser.parse_args()
    if not 0 < args.clients_per_round <= args.clients:
        parser.error("--clients-per-round must be between 1 and --clients")
    started = psutil.Process().create_time()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)

    train_x, train_y, test_x, test_y = mnist_tensors.load(mnist_tensors.data_dir(args.data_dir))
    train = TensorDataset(train_x, train_y)
    if args.clients > len(train):
        parser.error(f"--clients {args.clients} exceeds the {len(train)} training samples")
    partition = iid_partition(len(train), args.clients, args.seed)
    global_model = MnistCNN()
    client_model = MnistCNN()

    rounds = []
    first_round_s = None
    for round_number in range(1, args.rounds + 1):
        round_started = time.monotonic()
        sampled = rng.choice(args.clients, size=args.clients_per_round, replace=False)
        global_state = global_model.state_dict()
        states, weights, losses = [], [], []
        for client in sampled:
            state, samples, loss = client_update(client_model, global_state, train,
                                                 partition[client], args)
            states.append(state)
            weights.append(samples)
            losses.append(loss)
        global_model.load_state_dict(weighted_average(states, weights))
        accuracy = mnist_tensors.accuracy(global_model, test_x, test_y, batch_size=1000)
        if first_round_s is None:
            first_round_s = time.time() - started
        rounds.append({"round": round_number, "round_s": time.monotonic() - round_started,
                       "client_loss": sum(losses) / len(losses), "test_accuracy": accuracy})
        # Printed as it goes: a user of this loop watches the rounds go by.
        print(f"round {round_number}: {rounds[-1]['round_s']:.2f} s, "
              f"accuracy {accuracy:.4f}", flush=True)

    mnist_tensors.emit({
        "baseline": "plain_fedavg", "clients": args.clients,
        "clients_per_round": args.clients_per_round, "rounds": args.rounds,
        "local_epochs": args.local_epochs, "batch_size": args.batch_size, "lr": args.lr,
        "seed": args.seed, "samples_per_client": len(partition[0]),
        "wall_s": time.time() - started, "first_round_s": first_round_s,
        "accuracy": [r["test_accuracy"] for r in rounds],
        "final_accuracy": rounds[-1]["test_accuracy"], "per_round": rounds,
        "torch": torch.__version__, "threads": torch.get_num_threads()}, args.json)


if __name__ == "__main__":
    main()
