"""What every baseline shares, so that they all train the same model on the same data:
MNIST read from the IDX files with mptrain's reader (no torchvision), normalised as in
PyTorch's examples, a test-accuracy helper, and the JSON output."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for common
from common import mnist_dir  # noqa: E402
from mptrain.data.idx import load_mnist  # noqa: E402

MEAN, STD = 0.1307, 0.3081


def data_dir(argument: str | None) -> str:
    return str(mnist_dir(argument))


def load(directory: str):
    """Return normalised ``(train_x, train_y, test_x, test_y)``; images are float [N, 1, 28, 28]."""
    train_x, train_y, test_x, test_y = load_mnist(directory)

    def images(array):
        return ((torch.from_numpy(array).float() / 255 - MEAN) / STD).unsqueeze(1)

    return images(train_x), torch.from_numpy(train_y), images(test_x), torch.from_numpy(test_y)


def accuracy(model, test_x, test_y, batch_size: int = 1000) -> float:
    model.eval()
    with torch.no_grad():
        correct = sum(int((model(test_x[i:i + batch_size]).argmax(1)
                           == test_y[i:i + batch_size]).sum())
                      for i in range(0, len(test_x), batch_size))
    return correct / len(test_x)


def emit(result: dict, json_path: str | None) -> None:
    """Print the result as one JSON line (and write it to ``json_path`` when given)."""
    print(json.dumps(result), flush=True)
    if json_path:
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(json_path).write_text(json.dumps(result, indent=2) + "\n")


def add_training_arguments(parser, *, workers: int = 2, epochs: int = 1,
                           optimizer: str = "adam", seed: int = 0) -> None:
    """The flags every baseline takes; each passes the defaults of the code it imitates."""
    parser.add_argument("--data-dir")
    parser.add_argument("--workers", type=int, default=workers)
    parser.add_argument("--epochs", type=int, default=epochs)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--optimizer", default=optimizer, choices=("adam", "sgd"))
    parser.add_argument("--lr", type=float, help="default 0.001 for adam, 0.01 for sgd")
    parser.add_argument("--momentum", type=float, default=0.5, help="sgd only")
    parser.add_argument("--seed", type=int, default=seed)
    parser.add_argument("--json")


def parse_training_arguments(parser):
    args = parser.parse_args()
    if args.lr is None:
        args.lr = 0.001 if args.optimizer == "adam" else 0.01
    return args
