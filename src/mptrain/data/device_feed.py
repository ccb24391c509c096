"""Batches on the device a worker trains on, without making its steps wait for the copy.

On CPU a batch is two ``index_select`` calls on the shared tensors. On a GPU a copy from
ordinary (pageable) host memory is synchronous, so a small model's step would wait for
every batch to cross the bus; two ways out, chosen per worker and data set:

- **resident**: the data set is copied to the GPU once, when it fits comfortably in the
  memory still free there: ``RESIDENT_SHARE`` of it, divided among the ranks that may share
  the GPU (they all look at once, before any has copied), for the training set and for the
  test set each; batches are then gathered on the GPU. The MNIST training set is 47 MB
  as uint8 pixels (188 as float32): resident on any current GPU, for every worker on it;
  pixels are decoded to float32 there, a batch at a time.
- **prefetched**: otherwise each batch is gathered into pinned host memory and copied on a
  side stream while the previous step computes; the step's stream waits for that copy only
  (an event), and the tensors are marked as used by it (``record_stream``) so the caching
  allocator does not hand their memory out while the step still reads it.

Either way a worker sees the same samples in the same order as on CPU: only where the
bytes come from changes.
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator

import torch

from .shared import SharedTensorDataset

#: The largest share of a GPU's free memory the resident copies of one data set may take,
#: all ranks on it together (training and test set: twice that); the rest is for models,
#: activations and the allocator.
RESIDENT_SHARE = 0.2


class DeviceFeed:
    """``batches(pairs)`` turns ``(key, indices)`` pairs into ``(key, indices, inputs,
    targets)`` with the tensors on the feed's device. This one: CPU, no copy."""

    device = torch.device("cpu")

    def __init__(self, data: SharedTensorDataset):
        self.data = data

    def for_rows(self, pieces) -> tuple["DeviceFeed", list[torch.Tensor]]:
        """A feed for the rows of ``pieces`` (index tensors: each a client's samples) and
        their indices in it: for data drawn on demand a feed over those rows gathered once
        (``DeviceRows.gathered``), so that a batch does not look for its devices again;
        for any other data this feed and the indices as they are."""
        gathered = getattr(self.data, "gathered", None)
        if gathered is None:
            return self, list(pieces)
        block, positions = gathered(pieces)
        return feed_for(block, self.device), positions

    def batches(self, pairs: Iterable) -> Iterator:
        for key, indices in pairs:
            yield (key, indices, *self.batch(indices))

    def batch(self, indices: torch.Tensor):
        """One batch on the device, for loops that take no pairs (evaluation)."""
        return self.data.batch(indices)


class ResidentFeed(DeviceFeed):
    """The data set copied to the device once; batches gathered there."""

    def __init__(self, data: SharedTensorDataset, device: torch.device):
        super().__init__(data)
        self.device = device
        self.inputs = data.inputs.to(device)
        self.targets = data.targets.to(device)

    def batch(self, indices):
        on_device = indices.to(self.device, non_blocking=True)
        return _decoded(self.data, self.inputs.index_select(0, on_device)), \
            self.targets.index_select(0, on_device)


class Lookahead:
    """The ordering of a one-batch-ahead pipeline, apart from CUDA: ``start(pair)`` begins
    moving a batch and returns a handle, ``finish(handle)`` gives ``(key, indices, inputs,
    targets)`` ready for the step. Batch k+1 is started before batch k is handed out, so its
    copy runs while step k computes; each batch is finished just before it is handed out."""

    def __init__(self, start: Callable, finish: Callable):
        self.start, self.finish = start, finish

    def run(self, pairs: Iterable) -> Iterator:
        pending = None
        for pair in pairs:
            started = self.start(pair)
            if pending is not None:
                yield self.finish(pending)
            pending = started
        if pending is not None:
            yield self.finish(pending)


class PrefetchFeed(DeviceFeed):
    """Batches gathered into pinned host memory and copied to the GPU on a side stream, one
    batch ahead of the step."""

    def __init__(self, data: SharedTensorDataset, device: torch.device):
        super().__init__(data)
        self.device = device
        self.stream = torch.cuda.Stream(device)
        self._pipeline = Lookahead(self._start, self._finish)

    def batches(self, pairs):
        return self._pipeline.run(pairs)

    def batch(self, indices):
        _, _, inputs, targets = self._finish(self._start((None, indices)))
        return inputs, targets

    def _start(self, pair):
        key, indices = pair
        inputs, targets = (t.pin_memory() for t in _stored_batch(self.data, indices))
        with torch.cuda.stream(self.stream):
            inputs = inputs.to(self.device, non_blocking=True)
            targets = targets.to(self.device, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record(self.stream)
        return key, indices, inputs, targets, copied

    def _finish(self, started):
        key, indices, inputs, targets, copied = started
        step_stream = torch.cuda.current_stream(self.device)
        step_stream.wait_event(copied)
        inputs.record_stream(step_stream)
        targets.record_stream(step_stream)
        return key, indices, _decoded(self.data, inputs), targets   # pixels decoded on the GPU


class CollatedFeed(DeviceFeed):
    """Batches collated on the host (``data.ragged``: their shapes are the batch's own), then
    copied to the device -- each tensor of them, inputs given as a tuple too."""

    def __init__(self, data, device: torch.device):
        super().__init__(data)
        self.device = device

    def batch(self, indices):
        inputs, targets = self.data.batch(indices)
        return _moved(inputs, self.device), targets.to(self.device)


def _moved(inputs, device):
    if isinstance(inputs, (tuple, list)):
        return type(inputs)(_moved(part, device) for part in inputs)
    return inputs.to(device)


def _stored_batch(data, indices):
    """A batch as ``data`` stores it (uint8 pixels stay uint8 until on the device)."""
    stored = getattr(data, "stored_batch", None)
    return data.batch(indices) if stored is None else stored(indices)


def _decoded(data, inputs):
    decoded = getattr(data, "decoded", None)
    return inputs if decoded is None else decoded(inputs)


def piece_positions(pieces) -> list[torch.Tensor]:
    """Where each of ``pieces`` (index tensors) lies in the block they make end to end."""
    positions, start = [], 0
    for piece in pieces:
        positions.append(torch.arange(start, start + len(piece)))
        start += len(piece)
    return positions


def free_device_bytes(device: torch.device) -> int:
    free, _ = torch.cuda.mem_get_info(device)
    return free


def feed_for(data: SharedTensorDataset, device: torch.device, sharers: int = 1,
             free_bytes: Callable[[torch.device], int] = free_device_bytes, *,
             rank: int = 0, beat: Callable[[], None] | None = None) -> DeviceFeed:
    """The feed a worker on ``device`` reads ``data`` through (see the module doc);
    ``sharers``: the ranks that may keep a copy on the same GPU (the run's ranks: an upper
    bound, exact where they all train on one GPU as hogwild's do). Data not stacked
    (``--loader stream``) is read by loader threads (``data.stream_feed``): ``rank`` names
    the worker in their errors, ``beat`` keeps its heartbeat while it waits for them."""
    streamed = getattr(data, "feed_on", None)   # data.stream: it knows its own feed
    if streamed is not None:
        return streamed(device, rank, beat)
    if device.type != "cuda":
        return DeviceFeed(data)
    if hasattr(data, "collate"):   # sequences of different lengths: collated on the host
        return CollatedFeed(data, device)
    if getattr(data, "on_demand", False):   # rows drawn on the host, a batch at a time
        return PrefetchFeed(data, device)
    if data.nbytes * sharers <= RESIDENT_SHARE * free_bytes(device):
        return ResidentFeed(data, device)
    return PrefetchFeed(data, device)
