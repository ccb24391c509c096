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
import io
import pickle

import numpy as np
import torch

from ..errors import UserError, setting_name
from ..imports import unimportable_where
from .fingerprint import STREAMED
from .samples import (as_pair, as_targets, floats32, read_user, stacked_targets,
                      user_sample)
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
        if not _map_style(dataset):
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
        self.targets = _all_targets(dataset, size, (first[1], last[1]), what)
        self.collate: str | None = None
        #: Set for the run (``with_loader``): loader threads per worker, and how long a
        #: batch may take before the loader counts as hung (``--worker-timeout``).
        self.loader_workers, self.patience_s = 1, 300.0

    def __len__(self) -> int:
        return self._size

    def __getitem__(self, index):
        return self.read(int(index))

    def read(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Sample ``index`` as an (input, target) pair of tensors; what the user's code
        raises goes on as it is (the loader names rank and index)."""
        return as_pair(self.dataset[index], self.what, index)

    def collated(self, samples: list) -> tuple:
        """A batch's samples as the model takes them: stacked, or ``--collate``'s."""
        targets = _targets_of(samples)
        if self.collate is None:
            return floats32(torch.stack([inputs for inputs, _ in samples])), targets
        return self._sequences(samples, targets).batch(torch.arange(len(samples)))

    def batch(self, indices: torch.Tensor):
        return self.collated([self.read(int(i)) for i in indices])

    def head(self, count: int):
        return self.batch(torch.arange(min(count, len(self))))[0]

    def block(self, samples: list):
        """Samples held in private memory as a data set the stacked path's feeds read (a
        fedavg client's rows for its local epochs); sequences kept as they are, collated a
        batch at a time as the client trains."""
        from .shared import SharedTensorDataset

        if self.collate is None:
            return SharedTensorDataset(*self.collated(samples))
        return self._sequences(samples, _targets_of(samples) if samples else torch.empty(0))

    def _sequences(self, samples: list, targets: torch.Tensor):
        """``samples``' inputs held as sequences of different lengths (``data.ragged``)."""
        from .ragged import ragged_from

        sequences = ragged_from([inputs for inputs, _ in samples], targets, self.what)
        sequences.collate = self.collate
        return sequences

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
        return {"inputs": {**said, "dtype": STREAMED, "shape": [len(self), *self.input_shape]},
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
        buffer = io.BytesIO()
        _MappingsRefused(buffer, self.what).dump(self.dataset)
        return {**self.__dict__, "dataset": buffer.getvalue()}

    def __setstate__(self, state):
        self.__dict__.update({**state, "dataset": pickle.loads(state["dataset"])})


def _targets_of(samples: list) -> torch.Tensor:
    return as_targets(torch.stack([target for _, target in samples]))


class _MappingsRefused(pickle.Pickler):
    """The plain pickler, refusing a mapped file (``np.memmap``, a shared
    ``torch.from_file``): pickled, a mapping is its file's whole contents, which every
    spawned worker would then hold in private memory -- the copy the stream loader exists
    not to make."""

    def __init__(self, file, what: str):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.what = what

    def reducer_override(self, obj):
        if isinstance(obj, type):
            self._check_importable(obj)
        if isinstance(obj, np.memmap):
            self._refuse(f"an np.memmap ({obj.nbytes / 2**20:,.1f} MiB)")
        if isinstance(obj, torch.Tensor) and obj.untyped_storage().filename is not None:
            self._refuse(f"a tensor mapped from {obj.untyped_storage().filename} "
                         "(torch.from_file)")
        return NotImplemented

    def _check_importable(self, cls: type) -> None:
        """A class goes by reference, which a spawned worker must import: one of a
        notebook's (or the prompt's) ``__main__`` or defined inside a function it cannot,
        and each worker died unpickling it, the run saying only that they exited."""
        where = unimportable_where(cls.__module__, cls.__qualname__)
        if where:
            raise UserError(f"the {self.what} is a {cls.__qualname__.rpartition('.')[2]}, "
                            f"{where}, which spawn'd workers cannot import; define it in a .py "
                            f"module and import it, or use {setting_name('start_method')} fork")

    def _refuse(self, mapping: str):
        raise UserError(f"the {self.what} holds {mapping}, which a spawned worker would "
                        "receive whole: give the data set a __getstate__ that leaves it out "
                        "and a __setstate__ that maps the file again (docs/usage.md), or "
                        f"{setting_name('start_method')} fork")


#: Samples read at a time for their targets when a set has no ``targets`` of its own: each
#: chunk's targets are stacked (copied) before the next is read, so that a target that is a
#: view of its sample (``row[-1]``) never keeps more than a chunk of samples alive.
TARGETS_PER_READ = 4096


def _all_targets(dataset, size: int, ends: tuple, what: str) -> torch.Tensor:
    """Every sample's target, as stacking would give them: the data set's own ``targets``
    where they agree with its samples (:func:`_own_targets`), else read from its samples a
    chunk at a time -- one pass over the set, in the parent, through the page cache for a
    mapped file, holding no more than a chunk (give the set a ``targets`` to skip it)."""
    own = _own_targets(dataset, size, ends)
    if own is not None:
        return own
    chunks = []
    for start in range(0, size, TARGETS_PER_READ):
        chunks.append(stacked_targets([user_sample(dataset, index, what)[1] for index in
                                       range(start, min(size, start + TARGETS_PER_READ))],
                                      what))
    return as_targets(stacked_targets(chunks, what, torch.cat))


def _own_targets(dataset, size: int, ends: tuple) -> torch.Tensor | None:
    """The data set's ``targets`` (torchvision's sets have one), or None unless there are
    ``size`` of them, and those of the first and last samples are the targets these samples
    give (``ends``), of the same kind: a ``target_transform`` (the raw classes in
    ``targets``, other values given to the model) or float labels beside integer ``targets``
    would otherwise choose the task and the classes from other values than those trained on."""
    try:
        given = getattr(dataset, "targets", None)
        if given is None:
            return None
        # A copy: a read-only memory-mapped array is no tensor's storage.
        targets = given.clone() if isinstance(given, torch.Tensor) else \
            torch.from_numpy(np.array(given))
    except Exception:   # noqa: BLE001 - a targets that cannot be read is read sample by sample
        return None
    if targets.dim() == 0 or len(targets) != size or targets.shape[1:] != ends[0].shape:
        return None
    for own, given_by_sample in zip((targets[0], targets[-1]), ends):
        if _kind(own) != _kind(given_by_sample) or \
                not torch.equal(own.to(given_by_sample.dtype), given_by_sample):
            return None
    return as_targets(targets.to(ends[0].dtype))


def _kind(tensor: torch.Tensor) -> str:
    """Classes, labels of a mask, or values to regress: what the task is chosen from."""
    return "bool" if tensor.dtype == torch.bool else \
        "float" if tensor.is_floating_point() else "int"


def stacked_bytes(dataset, what: str) -> int:
    """What stacking ``dataset`` would put in shared memory, sized by the larger of its first
    and last samples (sample 0 alone may be the shortest of sequences that grow); read with
    the random generators put back after: a ``__getitem__`` that draws gives the same data
    under ``--seed`` whichever loader is chosen. 0 for an empty set, which stacking refuses
    in its words."""
    count = read_user(len, dataset, f"len({what})")
    if count == 0:
        return 0
    with generators_kept():
        ends = [user_sample(dataset, index, what) for index in sorted({0, count - 1})]
    return count * max(_stacked_sample_bytes(*sample) for sample in ends)


def _stacked_sample_bytes(inputs: torch.Tensor, targets: torch.Tensor) -> int:
    """One sample's share of the stacked tensors (float64 held as float32; a target as 8
    bytes at least)."""
    size = 4 if inputs.dtype == torch.float64 else inputs.element_size()
    return inputs.numel() * size + max(targets.numel(), 1) * 8


def choose_loader(loader: str, train, test, path: str = SHM_PATH) -> tuple[str, str | None]:
    """``(stacked or stream, why)`` for ``--loader``: ``auto`` stacks unless the stacked
    sets would not fit in ``/dev/shm``'s free space (``shm_free_bytes``)."""
    if loader != AUTO:
        return loader, None
    if not all(_map_style(data) for data in (train, test) if data is not None):
        return STACKED, None   # refused as stacking refuses it, in its words
    need = stacked_bytes(train, "training data") + \
        (stacked_bytes(test, "test data") if test is not None else 0)
    free = shm_free_bytes(path)
    if free is None or need <= free:
        return STACKED, None
    return STREAM, (f"stacked, the data would take {need / 2**20:,.0f} MiB of shared memory "
                    f"and {path} has {free / 2**20:,.0f} MiB free")


def _map_style(dataset) -> bool:
    return hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")


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
