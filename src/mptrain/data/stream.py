"""Data that is not stacked (``--loader stream``): the user's map-style data set read where it
lies, a batch at a time, by each worker for its own shard.

The stacked path (``data.shared``) reads every sample once in the parent and puts two
tensors in shared memory; a data set larger than ``/dev/shm`` cannot go that way. A
:class:`StreamDataset` keeps the user's data set as it is -- a memory-mapped array
(``np.memmap``, ``torch.from_file``, an Arrow table) stays a mapping of its file, read
through the page cache -- and only its targets (one number per sample: the task, the
classes and fedavg's partitions need them) are held, in shared memory. Workers inherit the
data set (fork) or get it as a plain pickle (spawn: never through ``/dev/shm``, where
torch's reducers would copy a tensor's storage).

It stands where a ``SharedTensorDataset`` does for what the feeds, the preflight and fedavg
ask (``len``, ``batch``, ``head``, ``targets``, ``gathered``), as ``DeviceRows`` does for
devices drawn on demand. Batches of training are read by a worker's loader threads
(``data.stream_feed``); ``batch`` here reads in the calling thread (evaluation, checks).
Which samples a rank reads in an epoch is the stacked path's choice, ``data.sharding``.
"""

from __future__ import annotations

import hashlib
import pickle

import numpy as np
import torch

from ..errors import UserError, setting_name
from .samples import as_targets, as_tensor, floats32, read_user, user_sample
from .seeding import generators_kept
from .shm_space import SHM_PATH, shm_free_bytes

STACKED, STREAM, AUTO = "stacked", "stream", "auto"
LOADERS = (STACKED, STREAM, AUTO)


class StreamDataset:
    """The user's data set ``dataset`` (``what``: "training data", "test data"), read a
    sample at a time by ``__getitem__``; ``collate`` (``--collate``) turns a batch's samples
    into the model's inputs, else they are stacked."""

    built = False          # nothing stacked to scan for NaN (``preflight.data_warnings``)
    decode = None
    varied_sample = None   # read afresh every epoch: nothing frozen to warn of
    is_shared = True       # the targets are shared when the bundle is; the rest stays put

    def __init__(self, dataset, what: str):
        if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
            raise UserError(f"{setting_name('loader')} stream reads a map-style Dataset; "
                            f"{what} is a {type(dataset).__name__} (it needs __len__ and "
                            "__getitem__)")
        self.dataset, self.what = dataset, what
        size = read_user(len, dataset, f"len({what})")
        if size == 0:
            raise UserError(f"{what} is empty")
        first = user_sample(dataset, 0, what)
        last = user_sample(dataset, size - 1, what) if size > 1 else first
        self._size = size
        self.input_shape = tuple(first[0].shape)
        #: Whether the first and the last sample have inputs of other shapes (token
        #: sequences of different lengths: ``--collate`` is needed).
        self.varied_lengths = first[0].shape != last[0].shape
        self.targets = _all_targets(dataset, size, what)
        self.collate: str | None = None
        #: Set for the run (``with_loader``): loader threads per worker, and how long a
        #: batch may take before the loader counts as hung (``--worker-timeout``).
        self.loader_workers, self.patience_s = 2, 300.0

    def __len__(self) -> int:
        return self._size

    def __getitem__(self, index):
        return self.read(int(index))

    def read(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Sample ``index`` as an (input, target) pair of tensors; what the user's code
        raises goes on as it is (the loader names rank and index)."""
        item = self.dataset[index]
        if not (isinstance(item, (tuple, list)) and len(item) == 2):
            raise TypeError(f"{self.what}[{index}] is a {type(item).__name__}; each sample "
                            "must be an (input, target) pair")
        return as_tensor(item[0], self.what, index), as_tensor(item[1], self.what, index)

    def collated(self, samples: list) -> tuple:
        """A batch's samples as the model takes them: stacked, or ``--collate``'s."""
        targets = as_targets(torch.stack([target for _, target in samples]))
        if self.collate is None:
            return floats32(torch.stack([inputs for inputs, _ in samples])), targets
        from .ragged import ragged_from

        block = ragged_from([inputs for inputs, _ in samples], targets, self.what)
        block.collate = self.collate
        return block.batch(torch.arange(len(samples)))

    def batch(self, indices: torch.Tensor):
        return self.collated([self.read(int(i)) for i in indices])

    def head(self, count: int):
        return self.batch(torch.arange(min(count, len(self))))[0]

    def block(self, samples: list):
        """Samples held in private memory as a data set the stacked path's feeds read (a
        fedavg client's rows for its local epochs)."""
        from .shared import SharedTensorDataset

        if self.collate is None:
            inputs, targets = self.collated(samples)
            return SharedTensorDataset(inputs, targets)
        from .ragged import ragged_from

        targets = self.collated(samples)[1] if samples else torch.empty(0)
        block = ragged_from([inputs for inputs, _ in samples], targets, self.what)
        block.collate = self.collate
        return block

    def gathered(self, pieces) -> tuple:
        """The rows of ``pieces`` (each a client's indices) read once, in this thread, into
        one block, and each piece's positions in it (see ``DeviceFeed.for_rows``)."""
        from .device_feed import piece_positions

        indices = [int(i) for piece in pieces for i in piece]
        return self.block([self.read(i) for i in indices]), piece_positions(pieces)

    def feed_on(self, device, rank: int = 0, beat=None):
        """The feed a worker reads this set through: loader threads (``data.stream_feed``)."""
        from .stream_feed import StreamFeed

        return StreamFeed(self, device, rank, beat)

    @property
    def nbytes(self) -> int:
        """What this set puts in shared memory: its targets only."""
        return self.targets.numel() * self.targets.element_size()

    def fingerprint(self) -> dict:
        """What a checkpoint records of this set (``data.fingerprint``): hashing every
        sample would read the whole set again, so its size, its targets and its first and
        last samples stand for it."""
        digest = hashlib.sha256()
        for index in sorted({0, len(self) - 1}):
            for tensor in self.read(index):
                digest.update(tensor.contiguous().reshape(-1).view(torch.uint8).numpy())
        digest.update(self.targets.contiguous().view(torch.uint8).numpy())
        said = {"sha256": digest.hexdigest()}
        return {"inputs": {**said, "dtype": "stream", "shape": [len(self), *self.input_shape]},
                "targets": {**said, "dtype": str(self.targets.dtype).removeprefix("torch."),
                            "shape": list(self.targets.shape)}}

    def materialize_(self):
        return self

    def share_memory_(self):
        self.targets.share_memory_()
        return self

    def place_in_(self, allocate, write: bool):
        return self   # torchrun's ranks each keep their own targets

    def __getstate__(self):
        # A plain pickle: torch's reducers (spawn's) would copy a tensor's storage into
        # /dev/shm. A data set that maps a file should reopen it in its __setstate__.
        return {**self.__dict__, "dataset": pickle.dumps(self.dataset,
                                                         protocol=pickle.HIGHEST_PROTOCOL)}

    def __setstate__(self, state):
        self.__dict__.update({**state, "dataset": pickle.loads(state["dataset"])})


def _all_targets(dataset, size: int, what: str) -> torch.Tensor:
    """Every sample's target: the data set's ``targets`` (torchvision's sets have one) when
    it has one of the right length, else read sample by sample (inputs dropped at once)."""
    given = getattr(dataset, "targets", None)
    if given is not None:
        try:   # a copy: a read-only memory-mapped array is no tensor's storage
            targets = given.clone() if isinstance(given, torch.Tensor) else \
                torch.from_numpy(np.array(given))
        except (TypeError, ValueError, RuntimeError):
            targets = None
        if targets is not None and len(targets) == size:
            return as_targets(targets)
    return as_targets(torch.stack([user_sample(dataset, index, what)[1]
                                   for index in range(size)]))


def stacked_bytes(dataset, what: str) -> int:
    """What stacking ``dataset`` would put in shared memory, from its first sample (read
    with the random generators put back after: a ``__getitem__`` that draws gives the same
    data under ``--seed`` whichever loader is chosen)."""
    with generators_kept():
        inputs, targets = user_sample(dataset, 0, what)
    size = 4 if inputs.dtype == torch.float64 else inputs.element_size()
    return len(dataset) * (inputs.numel() * size + max(targets.numel(), 1) * 8)


def choose_loader(loader: str, train, test, path: str = SHM_PATH) -> tuple[str, str | None]:
    """``(stacked or stream, why)`` for ``--loader``: ``auto`` stacks unless the stacked
    sets would not fit in ``/dev/shm``'s free space (``shm_free_bytes``)."""
    if loader != AUTO:
        return loader, None
    if not (hasattr(train, "__len__") and hasattr(train, "__getitem__")):
        return STACKED, None   # refused as stacking refuses it, in its words
    need = stacked_bytes(train, "training data") + \
        (stacked_bytes(test, "test data") if test is not None else 0)
    free = shm_free_bytes(path)
    if free is None or need <= free:
        return STACKED, None
    return STREAM, (f"stacked, the data would take {need / 2**20:,.0f} MiB of shared memory "
                    f"and {path} has {free / 2**20:,.0f} MiB free")


def streamed(dataset, what: str) -> StreamDataset:
    """``dataset`` to be read where it lies (a stacked set is read through its rows)."""
    if getattr(dataset, "on_demand", False):
        raise UserError(f"{setting_name('loader')} stream: this data is drawn on demand "
                        "already; leave the setting out")
    return StreamDataset(dataset, what)


def loader_threads(config, data) -> int:
    """The loader threads each worker runs beside its training thread (0: stacked)."""
    return config.loader_workers if isinstance(getattr(data, "train", None),
                                               StreamDataset) else 0
