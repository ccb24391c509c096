"""FedProx's devices generated on demand: ``--data synthetic:A,B --clients 100000``.

100,000 devices of lognormal(4, 2) + 50 samples are ~45M rows of 60 floats, ~11 GB: they
cannot be drawn up front in seconds, nor held. Past ``ON_DEMAND_ROWS`` rows the devices are
not drawn when the data is loaded; what is, is O(devices): each device's size (the same
draw as the eager generator's) and the offsets of its training and test rows. A device's
rows are then a pure function of ``(seed, device)`` -- its own stream,
``SeedSequence(seed, spawn_key=(DEVICE_STREAM, device))`` -- so any process, fork or
spawn, on any rank, draws the same rows, and a round touches only the devices it samples
(a small cache keeps the few last ones). A client, or a cohort of clients, draws its
devices' rows once into one block for its local epochs (``gathered``): its batches then read
that block as they read held data.

The pooled test accuracy is measured on the test rows of a fixed seeded sample of
``TEST_DEVICES`` devices, drawn at load (the banner says so); per-client evaluation scores
each sampled device on its own test split, drawn on demand like its training rows.

The rows of a device differ from the eager generator's for the same seed (that one draws
devices in blocks from one stream per block): both follow FedProx's recipe, and the same
maths draws them (``synthetic._draw_block``, here a block of one).
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import torch

from ..shared import SharedTensorDataset

#: Above this many rows (~480 MB of inputs) the devices are generated on demand.
ON_DEMAND_ROWS = 2_000_000
#: Devices whose test rows make the pooled test set of on-demand data.
TEST_DEVICES = 1_000
#: The spawn keys of the devices' streams and of the test sample's, apart from the eager
#: generator's (0: sizes, 1: the shared model, 2...: blocks).
DEVICE_STREAM = 2**31
TEST_SAMPLE_STREAM = 2**31 + 1
#: Devices a process keeps drawn: a client's batches, and a cohort's clients, hit them.
CACHED_DEVICES = 16


class SyntheticDevices:
    """Every device's rows, drawn when asked for."""

    def __init__(self, draw, features: int, params, seed: int, sizes: np.ndarray,
                 train_sizes: np.ndarray, shared_model=None):
        #: ``draw(rng, sizes, params, shared_model)``: the generator's maths
        #: (``synthetic._draw_block``), given so that this module needs no import of it.
        self.draw, self.features = draw, features
        self.params, self.seed, self.shared_model = params, seed % 2**64, shared_model
        self.sizes, self.train_sizes = sizes, train_sizes
        #: Devices this process has drawn (what the tests count: a round draws only its own).
        self.drawn = 0

    def __len__(self) -> int:
        return len(self.sizes)

    def rows(self, device: int) -> tuple[np.ndarray, np.ndarray]:
        """Device ``device``'s samples, training rows first: float32 x, int64 y."""
        self.drawn += 1
        stream = np.random.SeedSequence(self.seed, spawn_key=(DEVICE_STREAM, int(device)))
        return self.draw(np.random.default_rng(stream), self.sizes[device:device + 1],
                         self.params, self.shared_model)

    def test_sample(self, count: int = TEST_DEVICES) -> np.ndarray:
        """The devices whose test rows make the pooled test set: ``count`` of them, drawn
        without replacement from the seed, in order."""
        stream = np.random.SeedSequence(self.seed, spawn_key=(TEST_SAMPLE_STREAM,))
        chosen = np.random.default_rng(stream).choice(len(self), min(count, len(self)),
                                                      replace=False)
        return np.sort(chosen)


class DeviceRows:
    """One split (``train`` or ``test``) of every device, as a data set whose rows are
    drawn when a batch asks for them. It stands where a ``SharedTensorDataset`` does for
    what fedavg asks of its training set (``len``, ``batch``, ``head``); nothing of it is in
    shared memory, so placing and sharing it are no-ops."""

    on_demand = True
    built = False        # no tensors to scan for NaN (``preflight.data_warnings``)
    is_shared = True     # nothing to share
    nbytes = 0           # nothing in memory: the memory preflight counts no data
    varied_sample = None  # drawn by mptrain, not a user's __getitem__: nothing frozen to warn of

    def __init__(self, devices: SyntheticDevices, split: str):
        self.devices, self.split = devices, split
        sizes = devices.train_sizes if split == "train" else \
            devices.sizes - devices.train_sizes
        self.offsets = torch.from_numpy(np.concatenate([[0], np.cumsum(sizes)]))
        self._cache: OrderedDict = OrderedDict()

    def __len__(self) -> int:
        return int(self.offsets[-1])

    @property
    def input_shape(self) -> tuple:
        return (self.devices.features,)

    def device_rows(self, device: int) -> tuple[torch.Tensor, torch.Tensor]:
        """This split's rows of ``device``."""
        if device in self._cache:
            self._cache.move_to_end(device)
            return self._cache[device]
        x, y = self.devices.rows(device)
        cut = int(self.devices.train_sizes[device])
        keep = slice(None, cut) if self.split == "train" else slice(cut, None)
        rows = torch.from_numpy(x[keep]), torch.from_numpy(y[keep])
        self._cache[device] = rows
        if len(self._cache) > CACHED_DEVICES:
            self._cache.popitem(last=False)
        return rows

    def batch(self, indices: torch.Tensor):
        indices = torch.as_tensor(indices, dtype=torch.int64)
        owners = torch.searchsorted(self.offsets, indices, right=True) - 1
        if len(indices) and int(owners.min()) == int(owners.max()):   # a client's batch
            device = int(owners[0])
            x, y = self.device_rows(device)
            local = indices - self.offsets[device]
            return x.index_select(0, local), y.index_select(0, local)
        devices = torch.unique(owners).tolist()
        inputs = torch.empty((len(indices), *self.input_shape))
        targets = torch.empty(len(indices), dtype=torch.int64)
        for device in devices:
            where = torch.nonzero(owners == device).flatten()
            x, y = self.device_rows(device)
            local = indices[where] - self.offsets[device]
            inputs[where], targets[where] = x.index_select(0, local), y.index_select(0, local)
        return inputs, targets

    def gathered(self, pieces) -> tuple[SharedTensorDataset, list[torch.Tensor]]:
        """The rows of ``pieces`` (index tensors: each a client's samples) drawn once, one
        piece after another, as a data set held in memory, and each piece's positions in
        it. A client's local epochs, or a cohort's, then read their batches as from held
        data -- two ``index_select`` a batch -- instead of finding each batch's devices
        again: a cohort's stacked batch spans all its clients' devices, and at every step
        that search and gather cost 1.6-2.3x the whole step on held rows (issue 50)."""
        parts = [self.batch(torch.as_tensor(piece, dtype=torch.int64)) for piece in pieces]
        if len(parts) == 1:
            inputs, targets = parts[0]
        else:
            inputs = torch.cat([x for x, _ in parts]) if parts else \
                torch.empty((0, *self.input_shape))
            targets = torch.cat([y for _, y in parts]) if parts else \
                torch.empty(0, dtype=torch.int64)
        starts = np.cumsum([0] + [len(piece) for piece in pieces])
        positions = [torch.arange(int(starts[i]), int(starts[i + 1]))
                     for i in range(len(pieces))]
        return SharedTensorDataset(inputs, targets), positions

    def head(self, count: int) -> torch.Tensor:
        return self.batch(torch.arange(min(count, len(self))))[0]

    @property
    def targets(self) -> "_FirstTargets":
        return _FirstTargets(self)

    def __getitem__(self, index):
        x, y = self.batch(torch.tensor([int(index)]))
        return x[0], y[0]

    def fingerprint(self) -> dict:
        """What ``data.fingerprint`` records of this split: hashing its rows would draw
        every device (~11 GB at 100,000), but they are a pure function of the generator's
        parameters, the seed and the devices' sizes, so a digest of those stands for both
        tensors' bytes."""
        import hashlib

        devices, digest = self.devices, hashlib.sha256()
        digest.update(repr((self.split, devices.features, devices.params,
                            devices.seed)).encode())
        for array in (devices.sizes, devices.train_sizes, *(devices.shared_model or ())):
            digest.update(np.ascontiguousarray(array).tobytes())
        said = {"dtype": "float32", "sha256": digest.hexdigest()}
        return {"inputs": {**said, "shape": [len(self), devices.features]},
                "targets": {**said, "dtype": "int64", "shape": [len(self)]}}

    def materialize_(self):
        return self

    def share_memory_(self):
        return self

    def place_in_(self, allocate, write: bool):
        return self

    def __getstate__(self):   # a spawned worker draws its own devices
        return {**self.__dict__, "_cache": OrderedDict()}


class _FirstTargets:
    """The labels of the first rows (``targets[:n]``: a dry run's batch); all of them would
    be every device drawn, which nothing that runs on demand needs."""

    def __init__(self, rows: DeviceRows):
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, key):
        if not isinstance(key, slice) or key.start not in (None, 0) or key.step not in (None, 1):
            raise TypeError("devices generated on demand give only their first labels")
        stop = len(self.rows) if key.stop is None else min(key.stop, len(self.rows))
        return self.rows.batch(torch.arange(stop))[1]


class RowRange:
    """The index of clients that own consecutive rows: row ``i`` is sample ``i``. Slicing
    it gives an ``arange``; it holds two numbers, not an int64 per row (45M rows: 360 MB)."""

    def __init__(self, rows: int):
        self.rows = rows

    def __len__(self) -> int:
        return self.rows

    def __getitem__(self, key: slice) -> torch.Tensor:
        start, stop, _ = slice(None if key.start is None else int(key.start),
                               None if key.stop is None else int(key.stop)).indices(self.rows)
        return torch.arange(start, stop, dtype=torch.int64)

    def share_memory_(self):
        return self


def banner_line(data) -> str | None:
    """What the banner says of data drawn on demand (None for any other data)."""
    if not getattr(data.train, "on_demand", False):
        return None
    devices = data.train.devices
    sample = min(TEST_DEVICES, len(devices))
    return (f"{len(devices):,} devices drawn on demand (a round draws only its clients); "
            f"test accuracy on the test rows of a fixed seeded sample of {sample:,} devices "
            f"({len(data.test):,} samples)")
