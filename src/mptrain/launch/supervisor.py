"""Start worker processes, watch every one of them, stop them all when one fails.

The parent never ``join()``s blindly (the flaw of the classic Hogwild example): it waits on
every worker's pipe and process sentinel at once, so a worker that raises, exits, is killed
or stops beating its heart is noticed within a tick, reported with rank, pid, exit code or
signal and traceback, and the other workers are terminated. Results are values
(:class:`RunProcsResult` with :class:`WorkerFailure` records), in the spirit of
``torch.distributed.elastic.multiprocessing.api``.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import threading
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch.multiprocessing as torch_mp

from .lifecycle import die_with_parent, ignore_interrupts, leave

log = logging.getLogger(__name__)

TERMINATE_GRACE_S = 3.0


@dataclass(frozen=True)
class WorkerFailure:
    rank: int
    pid: int | None
    reason: str                 # "raised", "exited", "signal", "hung"
    exitcode: int | None = None
    signal_name: str | None = None
    traceback: str | None = None
    timeout_s: float | None = None

    def describe(self) -> str:
        where = f"worker rank {self.rank} (pid {self.pid})"
        if self.reason == "raised":
            last = (self.traceback or "").strip().splitlines()
            return f"{where} raised {last[-1] if last else 'an exception'}"
        if self.reason == "signal":
            return f"{where} was killed by {self.signal_name}"
        if self.reason == "hung":
            return f"{where} made no progress for {self.timeout_s:g} s and was stopped " \
                   "(raise --worker-timeout if a step can really take that long)"
        return f"{where} exited with code {self.exitcode} before finishing"


@dataclass
class RunProcsResult:
    failures: list[WorkerFailure] = field(default_factory=list)
    pids: dict[int, int] = field(default_factory=dict)
    exitcodes: dict[int, int | None] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failures


class Channel:
    """The worker's end of its pipe to the parent."""

    def __init__(self, connection):
        self._connection = connection

    def send(self, payload) -> None:
        _send(self._connection, "message", payload)


def _send(connection, kind, payload) -> None:
    # Plain pickle copies tensors into the message. torch's reducers would send shared
    # handles instead, which need the sender alive when the parent unpickles them.
    connection.send_bytes(pickle.dumps((kind, payload), protocol=pickle.HIGHEST_PROTOCOL))


def _bootstrap(target, rank: int, parent_pid: int, connection, args) -> None:
    """Module-level entry of every worker (spawn needs it importable)."""
    die_with_parent(parent_pid)
    ignore_interrupts()
    try:
        target(rank, Channel(connection), *args)
        _send(connection, "done", None)
    except BaseException:  # noqa: BLE001 - everything is reported to the parent
        try:
            _send(connection, "error", traceback.format_exc())
        except (OSError, ValueError):
            pass
        leave(1)
    leave(0)


class Supervisor:
    """Runs one group of workers to completion or first failure."""

    def __init__(self, start_method: str, *, heartbeat_timeout_s: float | None = None,
                 seconds_since_beat: Callable[[], list[float]] | None = None,
                 on_message: Callable[[int, object], None] | None = None,
                 on_tick: Callable[[], None] | None = None, tick_s: float = 0.1):
        self._context = torch_mp.get_context(start_method)
        self._start_method = start_method
        if start_method == "forkserver":
            # Workers are forked from a server that has torch imported already.
            self._context.set_forkserver_preload(["torch", "mptrain.launch.worker"])
        self._heartbeat_timeout_s = heartbeat_timeout_s
        self._seconds_since_beat = seconds_since_beat
        self._on_message = on_message or (lambda rank, payload: None)
        self._on_tick = on_tick or (lambda: None)
        self._tick_s = tick_s
        self._processes: list = []

    def run(self, target, args_per_rank: Sequence[tuple]) -> RunProcsResult:
        result = RunProcsResult()
        connections, finished = {}, set()
        self._processes = []
        parent_pid = None if self._start_method == "forkserver" else os.getpid()
        try:
            for rank, args in enumerate(args_per_rank):
                receiver, sender = self._context.Pipe(duplex=False)
                process = self._context.Process(
                    target=_bootstrap, args=(target, rank, parent_pid, sender, args),
                    name=f"mptrain-worker-{rank}", daemon=True)
                process.start()
                sender.close()  # the child holds the only sending end that matters
                self._processes.append(process)
                connections[rank] = receiver
                result.pids[rank] = process.pid
            self._watch(result, connections, finished)
        finally:
            self.stop_all()
            for rank, process in enumerate(self._processes):
                result.exitcodes[rank] = process.exitcode
            for connection in connections.values():
                connection.close()
        return result

    def _watch(self, result, connections, finished) -> None:
        tracebacks: dict[int, str] = {}
        live = {rank: process for rank, process in enumerate(self._processes)}
        by_sentinel = {process.sentinel: rank for rank, process in live.items()}
        by_connection = {connection: rank for rank, connection in connections.items()}
        open_connections = set(connections.values())
        while live:
            waitables = list(open_connections) + [live[r].sentinel for r in live]
            ready = multiprocessing.connection.wait(waitables, timeout=self._tick_s)
            for item in ready:
                if item in by_connection:
                    self._drain(item, by_connection[item], finished, tracebacks,
                                open_connections)
            for item in ready:
                rank = by_sentinel.get(item)
                if rank is None or rank not in live:
                    continue
                process = live.pop(rank)
                process.join()
                self._drain(connections[rank], rank, finished, tracebacks, open_connections)
                failure = self._failure(rank, process, rank in finished, tracebacks.get(rank))
                if failure is not None:
                    result.failures.append(failure)
            if result.failures:
                return
            hung = self._hung_ranks(live)
            if hung:
                result.failures.extend(
                    WorkerFailure(rank=r, pid=live[r].pid, reason="hung",
                                  timeout_s=self._heartbeat_timeout_s) for r in hung)
                return
            self._on_tick()

    def _drain(self, connection, rank, finished, tracebacks, open_connections) -> None:
        if connection not in open_connections:
            return
        try:
            while connection.poll():
                kind, payload = pickle.loads(connection.recv_bytes())
                if kind == "message":
                    self._on_message(rank, payload)
                elif kind == "done":
                    finished.add(rank)
                elif kind == "error":
                    tracebacks[rank] = payload
        except EOFError:
            open_connections.discard(connection)
        except OSError as err:
            open_connections.discard(connection)
            tracebacks.setdefault(rank, f"the pipe from this worker broke: {err!r}")

    @staticmethod
    def _failure(rank, process, finished, worker_traceback) -> WorkerFailure | None:
        code = process.exitcode
        if code == 0 and finished:
            return None
        if worker_traceback is not None:
            return WorkerFailure(rank, process.pid, "raised", code, traceback=worker_traceback)
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return WorkerFailure(rank, process.pid, "signal", code, signal_name=name)
        return WorkerFailure(rank, process.pid, "exited", code)

    def _hung_ranks(self, live) -> list[int]:
        if self._heartbeat_timeout_s is None or self._seconds_since_beat is None:
            return []
        silent = self._seconds_since_beat()
        return [rank for rank in live if silent[rank] > self._heartbeat_timeout_s]

    def stop_all(self) -> None:
        """SIGTERM every live worker, SIGKILL what is left after a grace period, reap all.

        A second Ctrl-C (or SIGTERM) while this runs kills the workers at once.
        """
        alive = [p for p in self._processes if p.exitcode is None and p.is_alive()]
        if not alive:
            return

        def force(signum, frame):
            for process in alive:
                if process.is_alive():
                    process.kill()

        with _signals_redirected(force):
            for process in alive:
                process.terminate()
            deadline = time.monotonic() + TERMINATE_GRACE_S
            for process in alive:
                process.join(max(0.0, deadline - time.monotonic()))
            for process in alive:
                if process.is_alive():
                    log.warning("worker pid %d ignored SIGTERM; sending SIGKILL", process.pid)
                    process.kill()
                    process.join()


@contextmanager
def _signals_redirected(handler):
    """Route SIGINT/SIGTERM to ``handler`` (main thread only; elsewhere leave them be)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
