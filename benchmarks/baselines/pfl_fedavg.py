"""pfl-research 0.6.0's own simulation of benchmarks/fl_vectorized.py's workload: FedAvg on
MNIST, IID clients, client SGD lr 0.1 without momentum, B=10, E=1, plain server averaging
(central SGD lr 1), seed 0, written as pfl's users write it (its benchmarks'
image_classification/pytorch/train.py is the model): the data put on the device once with
pfl's ``to_tensor``, one ``Dataset`` slice a user in a ``FederatedDataset`` with pfl's
``minimize_reuse`` user sampler, a ``PyTorchModel`` (local ``torch.optim.SGD``, central
SGD), ``SimulatedBackend`` weighting each user equally, ``FederatedAveraging.run`` with
``NNAlgorithmParams`` / ``NNTrainHyperParams``, and pfl's ``model.evaluate`` on the 10k
test set after the last round.

    .venv-pfl/bin/python benchmarks/baselines/pfl_fedavg.py [--data-dir DIR]
        [--model 2nn|cnn] [--clients 1200] [--samples-per-client 50]
        [--clients-per-round 50] [--rounds 20] [--device cpu|cuda] [--processes P]
        [--dist-backend pfl|gloo] [--threads N] [--json PATH]

The models are mptrain's ``mnist-2nn`` (McMahan 2NN) and ``mnist-cnn-fedavg`` (McMahan CNN,
fl_vectorized.py's CNN), imported from src/, with the loss and metrics methods pfl's
``PyTorchModel`` asks for attached as pfl's benchmarks attach them. ``--device`` goes to pfl
through its own ``PFL_PYTORCH_DEVICE``.

``--processes P`` (P > 1) is pfl's multi-process mode, started the way pfl's distributed
guide documents for several processes sharing one machine or GPU: this script starts itself
P times with ``PFL_WORKER_ADDRESSES`` (P localhost ports) and ``PFL_WORKER_RANK``; pfl then
splits each round's cohort among the processes and all-reduces the summed update with
torch.distributed. pfl picks the backend: NCCL whenever CUDA is available, gloo otherwise.
NCCL refuses two ranks on one GPU ("Duplicate GPU detected", NCCL >= 2.5) unless it is
>= 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1 (experimental), which this script sets for pfl's
choice; ``--dist-backend gloo`` makes pfl's ``init_process_group`` call use gloo instead
(gloo all-reduces CUDA tensors through host memory), the one change to pfl's behaviour
here, said in the output.
(pfl 0.6.0 under ``torchrun`` binds rank r to ``cuda:r``, so torchrun cannot put several
processes on one GPU.) On CPU each process gets ``--threads`` torch threads, by default the
usable cores divided by P.

s/round is the median of the rounds after the first (the first pays for start-up), as in
fl_vectorized.py; a round is timed by a pfl callback from the end of the previous one (a
CUDA synchronize first on the GPU). Prints the figures and, with ``--json``, writes them with
the device named. Without pfl installed it says so in one line and exits 2 (see
setup_pfl.sh).
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import time
import types
import warnings

MODELS = {"2nn": "Mnist2NN", "cnn": "FedAvgCNN"}
WAIT_S = 3600


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir")
    parser.add_argument("--model", choices=sorted(MODELS), default="2nn")
    parser.add_argument("--clients", type=int, default=1200)
    parser.add_argument("--samples-per-client", type=int, default=50)
    parser.add_argument("--clients-per-round", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--local-epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--lr", type=float, default=0.1, help="client SGD learning rate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--processes", type=int, default=1,
                        help="pfl worker processes (pfl's multi-process mode)")
    parser.add_argument("--dist-backend", choices=("pfl", "gloo"), default="pfl",
                        help="pfl: pfl's own choice (NCCL with CUDA); gloo: force gloo")
    parser.add_argument("--threads", type=int,
                        help="torch threads a process (default: usable cores // processes)")
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.clients * args.samples_per_client > 60_000:
        parser.error(f"--clients {args.clients} x --samples-per-client "
                     f"{args.samples_per_client} is more than MNIST's 60,000 training images")
    for name in ("clients", "samples_per_client", "clients_per_round", "rounds",
                 "local_epochs", "batch_size", "processes"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.clients_per_round > args.clients:
        parser.error("--clients-per-round cannot exceed --clients")
    return args


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def launch(args: argparse.Namespace) -> int:
    """pfl's documented multi-process start: the same script once per rank, told its rank
    and every rank's address through the environment. Rank 0 prints; the others' output
    is dropped but their errors are not. A rank that fails ends the others."""
    addresses = ",".join(f"localhost:{port}" for port in free_ports(args.processes))
    # `timeout` (gpu_check.sh) ends us with SIGTERM: end the ranks too, through `finally`.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(124))
    children = []
    for rank in range(args.processes):
        env = dict(os.environ, PFL_WORKER_ADDRESSES=addresses, PFL_WORKER_RANK=str(rank))
        children.append(subprocess.Popen(
            [sys.executable, *sys.argv], env=env,
            stdout=None if rank == 0 else subprocess.DEVNULL))
    deadline = time.monotonic() + WAIT_S
    status = 0
    try:
        while children and time.monotonic() < deadline:
            for child in list(children):
                code = child.poll()
                if code is None:
                    continue
                children.remove(child)
                if code != 0:
                    status = status or code
                    raise ChildProcessError
            time.sleep(0.2)
        if children:
            print(f"pfl_fedavg: ranks still running after {WAIT_S} s; ended", file=sys.stderr)
            status = 1
    except ChildProcessError:
        print(f"pfl_fedavg: a pfl rank exited with {status}; ending the others",
              file=sys.stderr)
    finally:
        for child in children:
            child.kill()
            child.wait(timeout=30)
    return status


def device_name(torch, device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name(0)
    return f"CPU {platform.processor() or platform.machine()}, " \
        f"{len(os.sched_getaffinity(0))} usable cores"


def main() -> int:
    args = parse_arguments()
    if args.processes > 1 and "PFL_WORKER_RANK" not in os.environ:
        return launch(args)
    rank = int(os.environ.get("PFL_WORKER_RANK", 0))
    # pfl's own device switch; read by pfl whenever it places a tensor.
    os.environ["PFL_PYTORCH_DEVICE"] = args.device
    if args.processes > 1 and args.device == "cuda" and args.dist_backend == "pfl":
        os.environ.setdefault("NCCL_MULTI_RANK_GPU_ENABLE", "1")

    import numpy as np
    import torch

    # pfl 0.6.0's all-reduce still names torch.distributed.reduce_op: one warning a rank.
    warnings.filterwarnings("ignore", message=".*reduce_op.* is deprecated")
    if args.device == "cuda" and not torch.cuda.is_available():
        print("pfl_fedavg: --device cuda but torch sees no CUDA device "
              f"(torch {torch.__version__})", file=sys.stderr)
        return 2
    threads = args.threads or max(1, len(os.sched_getaffinity(0)) // args.processes)
    torch.set_num_threads(threads)
    backend_used = None
    if args.processes > 1:
        backend_used = args.dist_backend if args.dist_backend == "gloo" else \
            ("nccl" if torch.cuda.is_available() else "gloo")
        if args.dist_backend == "gloo":
            force_gloo(torch)

    try:
        from pfl.aggregate.simulate import SimulatedBackend
        from pfl.aggregate.weighting import WeightByUser
        from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
        from pfl.callback.base import TrainingProcessCallback
        from pfl.data.dataset import Dataset
        from pfl.data.federated_dataset import FederatedDataset
        from pfl.data.sampling import get_user_sampler
        from pfl.hyperparam import NNEvalHyperParams, NNTrainHyperParams
        from pfl.internal.ops.pytorch_ops import get_default_device, to_tensor
        from pfl.metrics import Metrics, Weighted
        from pfl.model.pytorch import PyTorchModel
        import pfl.version
    except ImportError as error:
        print(f"pfl_fedavg: pfl[pytorch] is not installed here ({error}); "
              "run bash benchmarks/baselines/setup_pfl.sh and use .venv-pfl/bin/python",
              file=sys.stderr)
        return 2

    import mnist_tensors
    from mptrain.models import nets

    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    train_x, train_y, test_x, test_y = mnist_tensors.load(
        mnist_tensors.data_dir(args.data_dir))
    order = torch.randperm(len(train_x), generator=torch.Generator().manual_seed(args.seed))
    train_x, train_y = to_tensor(train_x[order]), to_tensor(train_y[order], dtype=None)
    size = args.samples_per_client
    users = {user: (train_x[user * size:(user + 1) * size],
                    train_y[user * size:(user + 1) * size])
             for user in range(args.clients)}
    training_data = FederatedDataset.from_slices(
        users, get_user_sampler("minimize_reuse", list(range(args.clients))))
    test_data = Dataset(raw_data=[to_tensor(test_x), to_tensor(test_y, dtype=None)])

    net = getattr(nets, MODELS[args.model])().to(get_default_device())
    net.loss = types.MethodType(classification_loss, net)
    net.metrics = types.MethodType(classification_metrics(Weighted), net)
    model = PyTorchModel(model=net, local_optimizer_create=torch.optim.SGD,
                         central_optimizer=torch.optim.SGD(net.parameters(), lr=1.0))
    backend = SimulatedBackend(training_data=training_data, val_data=None,
                               postprocessors=[WeightByUser()])
    algorithm_params = NNAlgorithmParams(
        central_num_iterations=args.rounds, evaluation_frequency=args.rounds,
        train_cohort_size=args.clients_per_round, val_cohort_size=0)
    train_params = NNTrainHyperParams(local_learning_rate=args.lr,
                                      local_num_epochs=args.local_epochs,
                                      local_batch_size=args.batch_size)
    eval_params = NNEvalHyperParams(local_batch_size=1000)

    class RoundClock(TrainingProcessCallback):
        """Seconds of each central iteration, first in the callback list so that no other
        callback's work is counted."""

        def __init__(self):
            self.laps: list[float] = []
            self._last = 0.0

        def on_train_begin(self, *, model):
            synchronize(torch, args.device)
            self._last = time.perf_counter()
            return Metrics()

        def after_central_iteration(self, aggregate_metrics, model, *, central_iteration):
            synchronize(torch, args.device)
            now = time.perf_counter()
            self.laps.append(now - self._last)
            self._last = now
            return False, Metrics()

    clock = RoundClock()
    started = time.perf_counter()
    model = FederatedAveraging().run(
        algorithm_params=algorithm_params, backend=backend, model=model,
        model_train_params=train_params, model_eval_params=eval_params,
        callbacks=[clock], send_metrics_to_platform=False)
    train_s = time.perf_counter() - started
    metrics = model.evaluate(test_data, name_formatting_fn=lambda name: f"test {name}",
                             eval_params=eval_params)
    accuracy = float(metrics.to_simple_dict(to_lowercase=True)["test accuracy"])
    if rank != 0:
        return 0

    later = clock.laps[1:] or clock.laps
    result = {
        "baseline": "pfl", "pfl": pfl.version.__version__, "torch": torch.__version__,
        "python": platform.python_version(), "device": args.device,
        "device_name": device_name(torch, args.device), "model": args.model,
        "clients": args.clients, "samples_per_client": args.samples_per_client,
        "clients_per_round": args.clients_per_round, "rounds": args.rounds,
        "local_epochs": args.local_epochs, "batch_size": args.batch_size, "lr": args.lr,
        "seed": args.seed, "processes": args.processes, "dist_backend": backend_used,
        "threads_per_process": threads, "s_per_round": statistics.median(later),
        "first_round_s": clock.laps[0], "round_s": clock.laps, "train_s": train_s,
        "accuracy": accuracy}
    dist = "" if backend_used is None else f", {backend_used} " + \
        ("(pfl's choice)" if args.dist_backend == "pfl" else "(forced)")
    print(f"pfl {result['pfl']} FedAvg {args.model} {args.clients}x{args.samples_per_client}, "
          f"{args.clients_per_round}/round, {args.rounds} rounds on {result['device_name']}, "
          f"{args.processes} process(es){dist}, {threads} thread(s) each: "
          f"{result['s_per_round']:.4f} s/round (first {result['first_round_s']:.2f} s), "
          f"test accuracy {accuracy:.4f}", flush=True)
    mnist_tensors.emit(result, args.json)
    return 0


def classification_loss(self, inputs, targets, eval=False):  # noqa: A002  (pfl's keyword)
    """The loss pfl's PyTorchModel calls on each batch, as pfl's benchmarks define it."""
    import torch.nn.functional as F

    self.eval() if eval else self.train()
    return F.cross_entropy(self(inputs), targets.long())


def classification_metrics(weighted):
    def metrics(self, inputs, targets, eval=True):  # noqa: A002
        """Summed loss and correct predictions, weighted by samples (pfl's benchmarks)."""
        import torch
        import torch.nn.functional as F

        self.eval() if eval else self.train()
        with torch.no_grad():
            logits = self(inputs)
            loss = F.cross_entropy(logits, targets.long(), reduction="sum").item()
            correct = (logits.argmax(1) == targets).sum().item()
        return {"loss": weighted(loss, len(inputs)), "accuracy": weighted(correct, len(inputs))}

    return metrics


def synchronize(torch, device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def force_gloo(torch) -> None:
    """pfl 0.6.0 calls init_process_group(backend='nccl') whenever CUDA is available; gloo
    lets several ranks share one GPU. Only the backend argument changes."""
    import torch.distributed as dist

    original = dist.init_process_group

    def init_process_group(*positional, **keywords):
        keywords.pop("backend", None)
        return original(*positional[1:], backend="gloo", **keywords)

    dist.init_process_group = init_process_group


if __name__ == "__main__":
    sys.exit(main())
