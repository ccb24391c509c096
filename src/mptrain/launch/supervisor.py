"""Start worker processes, watch every one of them, stop them all when one fails.

The parent never ``join()``s blindly (the flaw of the classic Hogwild example): it waits on
every worker's pipe and process sentinel at once, so a worker that raises, exits, is killed
or stops beating its heart is noticed within a tick, reported with rank, pid, exit code or
signal and traceback, and the other workers are terminated. Results are values
(:class:`RunProcsResult` with :class:`WorkerFailure` records), in the spirit of
``torch.distributed.elastic.multiprocessing.api``.

Starting is a phase of its own. Workers wait, asleep, at a start gate (a pipe they read one
byte from) until every worker is started: early workers would otherwise train and wait at
their first collective while the parent still forks the others, taking the cores it needs.
A SIGINT or SIGTERM that arrives while a worker is being started must not run the parent's
handler inside ``fork()``: Python runs the at-fork hooks (logging's among them) there and
ignores exceptions raised in them, so the run would go on. The signals are blocked around
each start and, in case another thread takes them, the handlers only note them while
workers start; a noted signal stops the start, every started worker is stopped and reaped,
and the signal goes to the handler it was meant for, in ordinary code.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import os
import pickle
import re
import signal
import threading
import time
import traceback
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

import torch.multiprocessing as torch_mp

from ..errors import Interrupted, exception_line
from ..errors import setting_name as named   # as the caller spelled the setting
from ..imports import user_files, user_import_path
from ..signals import (STOP_SIGNALS, put_back, replaceable, stop_signals_held,
                       stop_signals_noted, take_over)
from .lifecycle import die_with_parent, ignore_interrupts, leave
from .stacks import listen_for_stack_requests, stack_of

log = logging.getLogger(__name__)

TERMINATE_GRACE_S = 3.0
#: A pass of the watch loop this long means the parent was away from the pipes, busy with a
#: worker's message (writing a checkpoint or an output) or its tick: a pass takes
#: milliseconds otherwise, even on a loaded machine.
AWAY_S = 0.5
#: Shared memory is backed page by page as it is first written: a worker that writes a new
#: page once /dev/shm is full dies of SIGBUS.
SIGBUS_CAUSE = (" (shared memory could not be backed: /dev/shm is probably full; free space "
                "there, or in Docker start the container with a larger --shm-size)")
#: The exception's line of a traceback from a process whose ranks take turns (launch.turns).
HOSTED_FAILURE = re.compile(r"(?:[\w.]+\.)?HostedRankFailed: rank (?P<rank>\d+): (?P<cause>.*)")


@dataclass(frozen=True)
class WorkerFailure:
    rank: int
    pid: int | None
    reason: str                 # "raised", "exited", "signal", "hung"
    exitcode: int | None = None
    signal_name: str | None = None
    traceback: str | None = None
    timeout_s: float | None = None
    waiting_ranks: tuple[int, ...] = ()   # "hung": live ranks that waited for it meanwhile
    #: The ranks its process hosted, when ranks took turns in processes (``launch.turns``);
    #: ``rank`` is then the process's index, or for "hung" the rank that stopped.
    process_ranks: tuple[int, ...] = ()

    def who(self) -> str:
        """The worker process, by its rank or by the ranks it hosted."""
        if len(self.process_ranks) == 1:
            return f"the worker process of rank {self.process_ranks[0]}"
        if self.process_ranks:
            return f"the worker process of ranks {_span(self.process_ranks)}"
        return f"worker rank {self.rank}"

    def describe(self) -> str:
        where = f"{self.who()} (pid {self.pid})"
        if self.process_ranks and self.reason == "hung":
            where = f"rank {self.rank} in {where}"
        if self.reason == "raised":
            cause = exception_line(self.traceback or "") or "an exception"
            hosted = HOSTED_FAILURE.match(cause) if self.process_ranks else None
            if hosted:   # launch.turns names the rank that raised
                where, cause = f"rank {hosted['rank']} in {where}", hosted["cause"]
            return f"{where} raised {cause}"
        if self.reason == "signal":
            return f"{where} was killed by {self.signal_name}" + (
                SIGBUS_CAUSE if self.signal_name == "SIGBUS" else "")
        if self.reason == "hung":
            waiting = ""
            if self.waiting_ranks:
                names = ", ".join(str(rank) for rank in self.waiting_ranks)
                waiting = (f"; rank {names} was" if len(self.waiting_ranks) == 1
                           else f"; ranks {names} were") + " waiting for it at a collective"
            return f"{where} made no progress for {self.timeout_s:g} s and was stopped" \
                   f"{waiting} (raise {named('worker_timeout')} if a step can really take " \
                   "that long)"
        return f"{where} exited with code {self.exitcode} before finishing"


def _span(ranks: Sequence[int]) -> str:
    return f"{ranks[0]}-{ranks[-1]}" if list(ranks) == list(range(ranks[0], ranks[-1] + 1)) \
        else ", ".join(map(str, ranks))


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


def _bootstrap(target, rank: int, parent_pid: int, connection, gate, files, args) -> None:
    """Module-level entry of every worker (spawn needs it importable). ``files``: the
    user's files loaded by path, unpickled before ``args`` (see ``imports.UserFiles``)."""
    die_with_parent(parent_pid)
    ignore_interrupts()  # also unblocks the signals the parent blocked around fork
    _send(connection, "stack", listen_for_stack_requests())
    if not _wait_at_gate(gate):
        leave(1)  # the parent went away before opening it
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


def _wait_at_gate(gate) -> bool:
    """Sleep until the parent writes this worker's byte to the gate; False at end of file."""
    return os.read(gate.fileno(), 1) != b""


class Supervisor:
    """Runs one group of workers to completion or first failure."""

    def __init__(self, start_method: str, *, heartbeat_timeout_s: float | None = None,
                 seconds_since_beat: Callable[[], list[float]] | None = None,
                 waiting_ranks: Callable[[], list[bool]] | None = None,
                 on_message: Callable[[int, object], None] | None = None,
                 on_tick: Callable[[], None] | None = None,
                 on_started: Callable[[], None] | None = None, tick_s: float = 0.1,
                 ranks_of_processes: Sequence[Sequence[int]] | None = None):
        """``seconds_since_beat`` and ``waiting_ranks`` read the progress board (per rank:
        seconds since its last heartbeat; whether it waits at a collective): a rank silent
        for ``heartbeat_timeout_s`` is hung, and the ranks waiting meanwhile are named as
        waiting for it rather than blamed. ``ranks_of_processes``: the ranks each worker
        process hosts, when processes host several (default: process ``i`` is rank ``i``)."""
        self._ranks_of_processes = ranks_of_processes
        self._context = torch_mp.get_context(start_method)
        self._start_method = start_method
        if start_method == "forkserver":
            # Workers are forked from a server that has torch imported already.
            self._context.set_forkserver_preload(["torch", "mptrain.launch.worker"])
        self._heartbeat_timeout_s = heartbeat_timeout_s
        self._seconds_since_beat = seconds_since_beat
        self._waiting_ranks = waiting_ranks
        # Since when the parent has watched: the gate opening, or its return from time away.
        self._attended_since = time.monotonic()
        self._on_message = on_message or (lambda rank, payload: None)
        self._on_tick = on_tick or (lambda: None)
        self._on_started = on_started or (lambda: None)  # every worker released
        self._tick_s = tick_s
        self._processes: list = []

    def run(self, target, args_per_rank: Sequence[tuple]) -> RunProcsResult:
        result = RunProcsResult()
        connections, finished = {}, set()
        self._processes = []
        self._stack_files: dict[int, int | None] = {}   # process -> its dump file (stacks)
        parent_pid = None if self._start_method == "forkserver" else os.getpid()
        gate, gate_opener = self._context.Pipe(duplex=False)
        files = user_files()
        try:
            if self._start_method == "forkserver":
                # Started here, not inside the first start(): it would inherit the blocked
                # signals and keep them blocked for good.
                from multiprocessing import forkserver
                forkserver.ensure_running()
            with stop_signals_noted() as noted, self._import_path():
                for rank, args in enumerate(args_per_rank):
                    receiver, sender = self._context.Pipe(duplex=False)
                    process = self._context.Process(
                        target=_bootstrap,
                        args=(target, rank, parent_pid, sender, gate, files, args),
                        name=f"mptrain-worker-{rank}", daemon=True)
                    with stop_signals_held():
                        # Blocked until the process is on the list that stop_all() reaps.
                        try:
                            process.start()
                        finally:
                            sender.close()  # the child holds the only sending end that matters
                        self._processes.append(process)
                    connections[rank] = receiver
                    result.pids[rank] = process.pid
                    if noted:
                        break
            if noted:
                self.stop_all()
                _deliver(noted[0])
            _open_gate(gate_opener, len(self._processes))
            self._attended_since = time.monotonic()
            self._on_started()
            self._watch(result, connections, finished)
        finally:
            stopped_by = self.stop_all()
            for rank, process in enumerate(self._processes):
                result.exitcodes[rank] = process.exitcode
            for connection in [*connections.values(), gate, gate_opener]:
                connection.close()
        # Reached only when nothing was raised: the workers finished or one failed. A stop
        # signal that came while the others were being stopped after a failure is still a
        # stop (the run would otherwise be reported failed, and restarted).
        if stopped_by:
            _deliver(stopped_by[0])
        return result

    def _import_path(self):
        """spawn'd and forkserver workers start from this process's ``sys.path``, not from
        its modules: while they start, it holds the folders the user's import strings were
        imported from (see ``imports``)."""
        return nullcontext() if self._start_method == "fork" else user_import_path()

    def _watch(self, result, connections, finished) -> None:
        tracebacks: dict[int, str] = {}
        live = {rank: process for rank, process in enumerate(self._processes)}
        by_sentinel = {process.sentinel: rank for rank, process in live.items()}
        by_connection = {connection: rank for rank, connection in connections.items()}
        open_connections = set(connections.values())
        while live:
            waitables = list(open_connections) + [live[r].sentinel for r in live]
            waited_since = time.monotonic()
            ready = multiprocessing.connection.wait(waitables, timeout=self._tick_s)
            # Longer than its timeout: the parent was not running (stopped with its group by
            # Ctrl-Z, starved), and its workers may not have run since it came back either.
            self._note_time_away(waited_since + self._tick_s)
            busy_since = time.monotonic()
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
                    result.failures.append(replace(failure, process_ranks=self._hosted(rank)))
            if result.failures:
                return
            self._note_time_away(busy_since)
            hung = self._hung_ranks(live)
            if hung:
                stopped = {rank for _, rank in hung}
                waiting = tuple(r for r in self._ranks_waiting(live) if r not in stopped)
                result.failures.extend(
                    WorkerFailure(rank=rank, pid=live[process].pid, reason="hung",
                                  timeout_s=self._heartbeat_timeout_s, waiting_ranks=waiting,
                                  process_ranks=self._hosted(process),
                                  traceback=stack_of(live[process].pid,
                                                     self._stack_files.get(process)))
                    for process, rank in hung)
                return
            busy_since = time.monotonic()
            self._on_tick()
            self._note_time_away(busy_since)

    def _note_time_away(self, busy_since: float) -> None:
        """A worker that sends while the parent is away blocks until the parent reads its
        pipe again, and cannot beat meanwhile: the watchdog counts its silence from the
        parent's return, so that the parent's own slowness never makes a worker hung.
        ``busy_since``: when the parent's work (or wait) should have ended at the latest."""
        now = time.monotonic()
        if now - busy_since > AWAY_S:
            self._attended_since = now

    def _drain(self, connection, rank, finished, tracebacks, open_connections) -> None:
        if connection not in open_connections:
            return
        while True:
            try:
                if not connection.poll():
                    return
                kind, payload = pickle.loads(connection.recv_bytes())
            except EOFError:
                open_connections.discard(connection)
                return
            except OSError as err:
                open_connections.discard(connection)
                tracebacks.setdefault(rank, f"the pipe from this worker broke: {err!r}")
                return
            # Outside the try: what the parent does with a message (writing a checkpoint to
            # a full disk) fails in the parent, and is raised as the parent's error.
            if kind == "message":
                self._on_message(rank, payload)
            elif kind == "done":
                finished.add(rank)
            elif kind == "error":
                tracebacks[rank] = payload
            elif kind == "stack":
                self._stack_files[rank] = payload

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

    def _ranks_of(self, process: int) -> Sequence[int]:
        return (process,) if self._ranks_of_processes is None \
            else self._ranks_of_processes[process]

    def _hosted(self, process: int) -> tuple[int, ...]:
        """The ranks of ``process`` when ranks take turns in processes, else ()."""
        return () if self._ranks_of_processes is None \
            else tuple(self._ranks_of_processes[process])

    def _hung_ranks(self, live) -> list[tuple[int, int]]:
        """(process, rank) of every rank that stopped: silent for longer than the timeout
        and not waiting at a collective. In a process that hosts several ranks the others
        wait, silent, for their turn: they are blamed only when every rank of the process
        fell silent while waiting (the process stopped while it slept)."""
        if self._heartbeat_timeout_s is None or self._seconds_since_beat is None:
            return []
        silent = self._seconds_since_beat()
        waiting = self._waiting_ranks() if self._waiting_ranks is not None else None
        # Nobody can beat before the gate opens, however long starting took, nor while
        # blocked on the parent (see _note_time_away).
        attended = time.monotonic() - self._attended_since
        hung = []
        for process in live:
            quiet = [rank for rank in self._ranks_of(process)
                     if min(silent[rank], attended) > self._heartbeat_timeout_s]
            stopped = [rank for rank in quiet if waiting is None or not waiting[rank]]
            if not stopped and len(quiet) == len(self._ranks_of(process)):
                stopped = quiet
            hung += [(process, rank) for rank in stopped]
        return hung

    def _ranks_waiting(self, live) -> list[int]:
        if self._waiting_ranks is None:
            return []
        waiting = self._waiting_ranks()
        return [rank for process in sorted(live) for rank in self._ranks_of(process)
                if waiting[rank]]

    def stop_all(self) -> list[int]:
        """SIGTERM every live worker, SIGKILL what is left after a grace period, reap all.

        A stop signal while this runs kills the workers at once: a second Ctrl-C while a stop
        unwinds, or a first one after a worker failed. Return the stop signals that came,
        for the caller to deliver where none is unwinding yet.
        """
        alive = [p for p in self._processes if p.exitcode is None and p.is_alive()]
        noted: list[int] = []
        if not alive:
            return noted

        def force(signum, frame):
            noted.append(signum)
            for process in alive:
                if process.is_alive():
                    process.kill()

        with _signals_redirected(force):
            for process in alive:
                process.terminate()
                try:  # a stopped worker (SIGSTOP, a debugger) takes SIGTERM only once resumed
                    os.kill(process.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + TERMINATE_GRACE_S
            for process in alive:
                process.join(max(0.0, deadline - time.monotonic()))
            for process in alive:
                if process.is_alive():
                    log.warning("worker pid %d ignored SIGTERM; sending SIGKILL", process.pid)
                    process.kill()
                    process.join()
        return noted


@contextmanager
def _signals_redirected(handler):
    """Route the stop signals this process may take over (``signals.replaceable``) to
    ``handler`` (main thread only; elsewhere leave them be)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = take_over(handler, [sig for sig in STOP_SIGNALS if replaceable(sig)])
    try:
        yield
    finally:
        put_back(previous)


def _open_gate(opener, workers: int) -> None:
    """One byte per worker: each reads its own, so all of them start."""
    data = memoryview(b"\x01" * workers)
    while data:
        data = data[os.write(opener.fileno(), data):]


def _deliver(signum: int) -> None:
    """Hand a signal noted during the start to the handler now in place (the workers are
    stopped already); if that handler lets the program go on, stop the run anyway."""
    signal.raise_signal(signum)
    raise Interrupted(signum)
