"""A worker's batches of a :class:`~mptrain.data.stream.StreamDataset`, read by a bounded pool
of loader threads (``--loader-workers``) a few batches ahead of the step.

Threads, not processes: reading a memory-mapped array, decoding and ``torch.stack`` release
the interpreter's lock, the samples need no second trip through shared memory, and what a
thread raises is this process's own exception -- the supervisor reports it as it reports any
training worker's (traceback, rank; here the sample's index too). A pool lives for one
``batches`` call (an epoch, a client's local epochs): when it ends, however it ends (the
epoch done, an error, Ctrl-C), queued reads are cancelled and the threads told to stop, so
nothing is left running between epochs or after ``fit()`` returns. The threads are daemons:
one stuck for good in the user's ``__getitem__`` cannot keep the process alive.

A hung read is found by the worker itself: it waits for a batch in slices of ``BEAT_S``,
beating its heartbeat meanwhile (so the supervisor's watchdog does not stop it first, with
no word of the sample), and after ``--worker-timeout`` (the watchdog's own bound) raises
:class:`LoaderHung` naming the sample being read. With ``--loader-workers 0`` the samples are
read in the training thread and a hang is the watchdog's, as any step's is.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from typing import TYPE_CHECKING
from concurrent.futures import Future, TimeoutError as FutureTimeout

import torch

from ..errors import setting_name
from .device_feed import DeviceFeed, _moved, feed_for, piece_positions

if TYPE_CHECKING:
    from .stream import StreamDataset

#: How often a worker waiting for its loader beats its heartbeat.
BEAT_S = 0.25
#: How long closing a pool waits for a thread that is still reading (it is a daemon).
CLOSE_WAIT_S = 1.0
#: Rows of a fedavg client's one read job: a client's rows are split so that the threads
#: read them side by side (all of them are held afterwards anyway, as the client's block).
ROWS_PER_READ = 64


class LoaderFailed(RuntimeError):
    """A sample, or a batch's collate, raised in the loader."""


class LoaderHung(RuntimeError):
    """The loader read nothing for ``--worker-timeout`` seconds."""


class _Reading:
    """What one job is doing, for the message if it fails or hangs."""

    def __init__(self):
        self.index: int | None = None
        self.stage = "queued"


class LoaderPool:
    """``threads`` daemon threads that run ``read(indices, reading)`` jobs in the order
    submitted; ``submit`` gives a future and the job's :class:`_Reading`."""

    def __init__(self, read, threads: int, name: str):
        self._read, self._jobs = read, queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True)
                         for i in range(threads)]
        for thread in self._threads:
            thread.start()

    def submit(self, indices) -> tuple[Future, _Reading]:
        future, reading = Future(), _Reading()
        self._jobs.put((future, indices, reading))
        return future, reading

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            future, indices, reading = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(self._read(indices, reading))
            except BaseException as err:  # noqa: BLE001 - handed to the waiting thread
                future.set_exception(err)

    def close(self) -> None:
        """Cancel what is queued, stop the threads; wait a moment for those reading."""
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job[0].cancel()
        for _ in self._threads:
            self._jobs.put(None)
        deadline = time.monotonic() + CLOSE_WAIT_S
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))


class StreamFeed(DeviceFeed):
    """Batches of a stream data set on ``device``, read ahead by the loader threads."""

    def __init__(self, data: StreamDataset, device: torch.device, rank: int = 0,
                 beat=None):
        super().__init__(data)
        self.device, self.rank = device, rank
        self._beat = beat or (lambda: None)

    # -- what the training loops call -----------------------------------------------------
    def batches(self, pairs):
        threads = self.data.loader_workers
        if threads == 0:   # read in this thread: a hang is the watchdog's
            for key, indices in pairs:
                yield (key, indices, *self._on_device(self._read_batch(indices, _Reading())))
            return
        pool = LoaderPool(self._read_batch, threads, f"mptrain-loader-rank{self.rank}")
        pending: deque = deque()
        try:
            for key, indices in pairs:
                pending.append((key, indices, *pool.submit(indices)))
                if len(pending) >= 2 * threads:   # bounded: two batches per thread ahead
                    yield self._finished(pending.popleft())
            while pending:
                yield self._finished(pending.popleft())
        finally:
            for _, _, future, _ in pending:
                future.cancel()
            pool.close()

    def batch(self, indices):
        return self._on_device(self._read_batch(indices, _Reading()))

    def for_rows(self, pieces):
        """A fedavg client's rows (or a cohort's) read once by the pool into a block in
        private memory, and a stacked feed over it for its local epochs."""
        pieces = list(pieces)
        indices = torch.cat([torch.as_tensor(p, dtype=torch.int64) for p in pieces]) \
            if pieces else torch.empty(0, dtype=torch.int64)
        chunks = [(None, chunk) for chunk in torch.split(indices, ROWS_PER_READ)]
        samples = [sample for *_, read in self._raw_batches(chunks) for sample in read]
        return feed_for(self.data.block(samples), self.device), piece_positions(pieces)

    # -- reading ----------------------------------------------------------------------------
    def _raw_batches(self, pairs):
        threads = self.data.loader_workers
        if threads == 0:
            for key, indices in pairs:
                yield key, indices, self._read_samples(indices, _Reading())
            return
        pool = LoaderPool(self._read_samples, threads, f"mptrain-loader-rank{self.rank}")
        try:
            jobs = [(key, indices, *pool.submit(indices)) for key, indices in pairs]
            for job in jobs:
                yield job[0], job[1], self._result(job[2], job[3])
        finally:
            pool.close()

    def _read_samples(self, indices, reading: _Reading) -> list:
        samples = []
        for index in indices.tolist():
            reading.index, reading.stage = index, "read"
            try:
                samples.append(self.data.read(index))
            except Exception as err:
                raise LoaderFailed(f"rank {self.rank}: reading sample {index} of the "
                                   f"{self.data.what} raised {type(err).__name__}: {err}"
                                   ) from err
        return samples

    def _read_batch(self, indices, reading: _Reading):
        samples = self._read_samples(indices, reading)
        reading.stage = "collate"
        try:
            return self.data.collated(samples)
        except Exception as err:
            first = int(indices[0]) if len(indices) else None
            raise LoaderFailed(f"rank {self.rank}: collating the batch of samples {first}... "
                               f"of the {self.data.what} raised {type(err).__name__}: {err}"
                               ) from err

    def _finished(self, job):
        key, indices, future, reading = job
        return (key, indices, *self._on_device(self._result(future, reading)))

    def _result(self, future: Future, reading: _Reading):
        """The job's result, waited for in slices, beating; :class:`LoaderHung` after the
        loader's patience (``--worker-timeout``)."""
        patience = self.data.patience_s
        deadline = time.monotonic() + patience
        while True:
            try:
                return future.result(timeout=min(BEAT_S, max(0.0, deadline - time.monotonic())))
            except FutureTimeout:
                if time.monotonic() >= deadline:
                    what = "reading sample" if reading.stage == "read" else \
                        "collating the batch after sample"
                    where = f"{what} {reading.index}" if reading.index is not None \
                        else "a batch still queued"
                    raise LoaderHung(f"rank {self.rank}: the loader made no progress for "
                                     f"{patience:g} s, {where} of the {self.data.what} "
                                     f"(raise {setting_name('worker_timeout')} if a sample "
                                     "can really take that long)") from None
                self._beat()

    def _on_device(self, batch):
        inputs, targets = batch
        if self.device.type == "cpu":
            return inputs, targets
        return _moved(inputs, self.device), targets.to(self.device)
