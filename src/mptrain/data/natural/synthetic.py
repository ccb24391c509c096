"""FedProx's Synthetic(alpha, beta) (Li et al. 2020, section 5.1), generated, not downloaded:
``--data synthetic:ALPHA,BETA`` and ``synthetic-iid``.

The recipe of the paper's generator (FedProx's ``data/synthetic_*/generate_*.py``), each
device k a client: ``samples_k = int(lognormal(4, 2)) + 50``; the device's model
``W_k ~ N(u_k, 1)`` [60 x 10] and ``b_k ~ N(u_k, 1)`` [10] with ``u_k ~ N(0, alpha)``; its
inputs ``x ~ N(v_k, diag(j^-1.2))`` with ``v_k ~ N(B_k, 1)``, ``B_k ~ N(0, beta)``; labels
``argmax(x W_k + b_k)`` (the generator's softmax does not move the argmax). As there,
alpha and beta are standard deviations. ``synthetic-iid``: one ``W, b ~ N(0, 1)`` for all
devices and ``v_k = 0``. Each device keeps its first ``int(0.9 * samples_k)`` samples for
training, the rest for its test split (the paper shuffles first; the samples are i.i.d.,
so the first 90% are as random a 90%).

Vectorised over devices (``--clients`` sets their number; 30 by default, the paper's):
devices are drawn in fixed blocks, each from its own stream of the seed
(``SeedSequence(seed).spawn``), so the data depend on ``--seed`` and the device count only,
never on how the work is cut.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from ...errors import UserError
from ..shared import SharedTensorDataset, shared_zeros
from .clients import NaturalClients, NaturalData
from .on_demand import ON_DEMAND_ROWS
from .recipes import SYNTHETIC_DEVICES

FEATURES = 60
CLASSES = 10
_BLOCK = 256   # devices drawn together: bounds the temporaries, fixes the random streams
_VARIANCE = np.arange(1, FEATURES + 1, dtype=np.float64) ** -1.2


#: The largest alpha and beta: inputs are about beta (kept as float32) and logits about
#: alpha * beta * FEATURES (float64), both finite far past this; 1e308 drew infinite
#: inputs and NaN logits. FedProx's are 0 to 1.
MAX_DEVIATION = 1e6


def parse_synthetic(name: str) -> tuple[float, float] | None:
    """``synthetic:ALPHA,BETA`` as (alpha, beta); ``synthetic-iid`` as None."""
    if name == "synthetic-iid":
        return None
    if name.startswith("synthetic-iid:"):
        raise UserError(f"--data {name!r}: synthetic-iid takes no parameters (its devices "
                        "share one model, their inputs one mean); write synthetic-iid, or "
                        "synthetic:ALPHA,BETA for devices that differ")
    text = name.partition(":")[2]
    parts = text.split(",")
    try:
        alpha, beta = (float(p) for p in parts) if len(parts) == 2 else (None, None)
    except ValueError:
        alpha = beta = None
    if alpha is None or not (0 <= alpha <= MAX_DEVIATION and 0 <= beta <= MAX_DEVIATION):
        raise UserError(f"--data {name!r}: write synthetic:ALPHA,BETA with two numbers "
                        "from 0 to 1e6 (FedProx's: synthetic:0,0, "
                        "synthetic:0.5,0.5, synthetic:1,1), or synthetic-iid")
    return alpha, beta


def load_synthetic(name: str, devices: int | None = None, seed: int = 0,
                   on_demand: bool | None = None):
    """The bundle of ``synthetic:ALPHA,BETA`` or ``synthetic-iid`` over ``devices`` (None:
    the paper's 30), drawn from ``seed``. ``on_demand``: the devices drawn when a round asks
    for them (``on_demand``); None: when they are more than ``ON_DEMAND_ROWS`` rows."""
    from .recipes import natural_recipe

    params = parse_synthetic(name)
    devices = SYNTHETIC_DEVICES if devices is None else devices
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise UserError(f"--data {name}: the number of devices (--clients) must be a whole "
                        f"number >= 1, got {devices!r}")
    root = np.random.SeedSequence(seed % 2**64)
    sizes_stream, shared_stream, *block_streams = root.spawn(2 + _blocks(devices))
    sizes = np.random.default_rng(sizes_stream).lognormal(4, 2, devices).astype(np.int64) + 50
    train_sizes = (0.9 * sizes).astype(np.int64)
    test_sizes = sizes - train_sizes
    shared_model = None
    if params is None:
        rng = np.random.default_rng(shared_stream)
        shared_model = (rng.normal(0, 1, (FEATURES, CLASSES)), rng.normal(0, 1, CLASSES))
    if on_demand is None:
        on_demand = int(sizes.sum()) > ON_DEMAND_ROWS
    if on_demand:
        return _on_demand(name, params, seed, sizes, train_sizes, shared_model)
    train_x = shared_zeros((int(train_sizes.sum()), FEATURES))
    test_x = shared_zeros((int(test_sizes.sum()), FEATURES))
    train_y = shared_zeros((len(train_x),), torch.int64)
    test_y = shared_zeros((len(test_x),), torch.int64)
    train_at = np.concatenate([[0], np.cumsum(train_sizes)])
    test_at = np.concatenate([[0], np.cumsum(test_sizes)])
    for block, stream in enumerate(block_streams):
        first, last = block * _BLOCK, min(devices, (block + 1) * _BLOCK)
        x, y = _draw_block(np.random.default_rng(stream), sizes[first:last], params,
                           shared_model)
        keep = _first_rows(sizes[first:last], train_sizes[first:last])
        span = slice(train_at[first], train_at[last])
        train_x[span] = torch.from_numpy(x[keep])
        train_y[span] = torch.from_numpy(y[keep])
        span = slice(test_at[first], test_at[last])
        test_x[span] = torch.from_numpy(x[~keep])
        test_y[span] = torch.from_numpy(y[~keep])
    clients = NaturalClients.from_sizes(train_sizes, test_sizes)
    return NaturalData(name=name, train=SharedTensorDataset(train_x, train_y),
                      test=SharedTensorDataset(test_x, test_y),
                      output_size=CLASSES, default_model="mclr",
                      defaults=natural_recipe("synthetic", devices), clients=clients)


def _on_demand(name, params, seed, sizes, train_sizes, shared_model) -> NaturalData:
    """The bundle of devices drawn on demand: O(devices) now, a device's rows when asked;
    the test set is the test rows of a seeded sample of devices."""
    from .on_demand import DeviceRows, SyntheticDevices
    from .recipes import natural_recipe

    devices = SyntheticDevices(_draw_block, FEATURES, params, seed, sizes, train_sizes,
                               shared_model)
    tests = DeviceRows(devices, "test")
    sample = [tests.device_rows(device) for device in devices.test_sample()]
    test = SharedTensorDataset(torch.cat([x for x, _ in sample]),
                               torch.cat([y for _, y in sample]))
    clients = NaturalClients.from_sizes(train_sizes, sizes - train_sizes)
    return NaturalData(name=name, train=DeviceRows(devices, "train"), test=test,
                       output_size=CLASSES, default_model="mclr",
                       defaults=natural_recipe("synthetic", len(sizes)),
                       clients=replace(clients, test_data=tests))


def _blocks(devices: int) -> int:
    return -(-devices // _BLOCK)


def _first_rows(sizes: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """A mask over the rows of devices of ``sizes`` rows: each device's first ``keep``."""
    starts = np.repeat(np.concatenate([[0], np.cumsum(sizes)[:-1]]), sizes)
    return np.arange(int(sizes.sum())) - starts < np.repeat(keep, sizes)


def _draw_block(rng: np.random.Generator, sizes: np.ndarray, params, shared_model):
    """The samples of a block of devices, one device after another: float32 x, int64 y."""
    count, rows = len(sizes), int(sizes.sum())
    owner = np.repeat(np.arange(count), sizes)
    if params is None:
        means = np.zeros((count, FEATURES))
        weights, biases = shared_model
    else:
        alpha, beta = params
        model_mean = rng.normal(0, alpha, count)                       # u_k
        input_mean = rng.normal(rng.normal(0, beta, count)[:, None], 1,
                                (count, FEATURES))                     # v_k ~ N(B_k, 1)
        weights = rng.normal(model_mean[:, None, None], 1, (count, FEATURES, CLASSES))
        biases = rng.normal(model_mean[:, None], 1, (count, CLASSES))
        means = input_mean
    x = means[owner] + rng.standard_normal((rows, FEATURES)) * np.sqrt(_VARIANCE)
    if params is None:
        logits = x @ weights + biases
    elif count == 1:   # one device (drawn on demand): one product
        logits = x @ weights[0] + biases[0]
    else:
        # x_n W_{k(n)}: one feature at a time, so no [rows, 60, 10] gather is made.
        logits = biases[owner].copy()
        for j in range(FEATURES):
            logits += x[:, j:j + 1] * weights[owner, j, :]
    return x.astype(np.float32), logits.argmax(axis=1).astype(np.int64)
