"""The event schedule of an asynchronous run (FedBuff, Nguyen et al. 2022), computed ahead
from the seed: which client trains from which server version, when each update arrives, and
which updates each server step applies. Pure Python, no torch, no processes.

The server keeps ``concurrency`` clients training. A client's update takes the virtual
seconds ``duration(client)`` says (the clock's: speeds, data, local epochs, model bytes --
never a training result), so the whole sequence of events is known before anything trains.
When an update arrives, its staleness is the server's version now minus the version it
started from; older than ``max_staleness`` it is dropped, else it enters the buffer, and
every ``buffer_size`` updates the server steps (version + 1). A freed slot is refilled at
once with a client drawn uniformly from those available, not training, and -- where any is
left -- not yet dispatched at this version (so a client trains from one model once: its
seed is its version's); it starts from the version of that moment. A client that goes
offline before it would finish (``availability.online_until``) is lost: its slot frees
when it goes offline, and nothing arrives. A slot that finds nobody to draw waits until a
client comes online (``next_online``), or -- someone online but training -- looks again
``RETRY_S`` later if no arrival fills it first. Ties go to the earlier dispatch.

So the clients that train from version ``v`` are known once step ``v`` is: they all start
from the same model, like a synchronous round's. ``plan(v)`` says them (those that will be
applied; a lost one never finishes, and one that will arrive too stale is listed apart: only
a client's personal state keeps what it trains) with the rows of the pending table they
write, and the updates step ``v`` applies. A row is taken when its update trains and freed
after the step that applies it: at most ``concurrency + buffer_size`` rows are ever held.
"""

from __future__ import annotations

import heapq
import random
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Protocol

from ...errors import UserError
from ..sampling import mix_seed

APPLIED, STALE, LOST = "applied", "stale", "lost"
#: How long a free slot waits before it looks again, when the clients online are all
#: training (virtual seconds).
RETRY_S = 60.0
#: Events without a server step after which the availability trace is taken to leave too
#: few clients online ever to fill a buffer.
MOST_EVENTS_PER_STEP = 1_000_000
#: Uniform draws tried before the eligible clients are listed (many clients: O(1) a draw).
DRAW_TRIES = 32
_DISPATCH = 0x5EED_A51C


class Availability(Protocol):
    """The clock's availability trace, as the schedule asks it."""

    def available(self, client: int, t: float) -> bool: ...

    def online_until(self, client: int, t: float) -> float: ...

    def next_online(self, clients: int, t: float) -> float: ...

    def available_clients(self, clients: int, t: float) -> list[int]: ...


@dataclass
class Update:
    """One client's update: dispatched at ``start_s`` from server ``version``, arriving at
    ``finish_s``. ``fate`` is None while it trains; ``step`` is the server step whose buffer
    took it, ``row`` its row of the pending table (applied updates only)."""

    number: int          # dispatch order, from 0
    client: int
    version: int
    start_s: float
    finish_s: float
    fate: str | None = None
    staleness: int | None = None
    step: int | None = None
    row: int | None = None


@dataclass
class _Record:
    """A server step as the simulation saw it."""

    time_s: float
    applies: tuple
    stale: tuple
    lost: tuple
    in_flight: int = 0


@dataclass(frozen=True)
class StepPlan:
    """Server step ``index`` (from version ``index`` to ``index + 1``): the updates that
    train from version ``index`` (dispatch order, each with its row), the buffer it applies
    (arrival order), and what happened while the buffer filled."""

    index: int
    time_s: float                   # virtual time of the step
    trains: tuple[Update, ...]
    applies: tuple[Update, ...]
    stale: tuple[Update, ...]       # arrived too stale, dropped
    lost: tuple[Update, ...]        # their clients went offline
    in_flight: int                  # clients training right after the step
    #: The updates that start from version ``index`` and will arrive too stale: the server
    #: drops them, so only a client's own state (--personalize) keeps what they train.
    trains_dropped: tuple[Update, ...] = ()


class EventSchedule:
    """The run's events, simulated as far as they are asked for (``plan``)."""

    def __init__(self, clients: int, concurrency: int, buffer_size: int,
                 duration: Callable[[int], float], seed: int,
                 max_staleness: int | None = None, availability: Availability | None = None):
        if not 1 <= buffer_size <= concurrency <= clients:
            raise ValueError("need 1 <= buffer_size <= concurrency <= clients")
        self.clients, self.concurrency, self.buffer_size = clients, concurrency, buffer_size
        self.duration, self.max_staleness, self.availability = \
            duration, max_staleness, availability
        self._rng = random.Random(mix_seed(seed, _DISPATCH))
        self._updates: list[Update] = []
        self._by_version: dict[int, list[Update]] = {}
        self._records: list[_Record] = []
        self._heap: list[tuple[float, int, int]] = []   # (time, 0 arrival / 1 retry, number)
        self._now, self._version, self._idle = 0.0, 0, concurrency
        self._in_flight: set[int] = set()
        self._this_version: set[int] = set()
        self._buffer: list[Update] = []
        self._stale: list[Update] = []
        self._lost: list[Update] = []
        self._stepped: _Record | None = None   # the step the event being handled made
        self._retry_pending = False
        self._events_since_step = 0
        self._free_rows = list(range(self.rows))
        self._rows_through = -1
        self._refill()

    @property
    def rows(self) -> int:
        """Rows of the pending table: enough for any step."""
        return self.concurrency + self.buffer_size

    # -- what the workers ask ---------------------------------------------------------------
    def plan(self, index: int) -> StepPlan:
        """Step ``index``: who trains from version ``index``, what the step applies."""
        while self._rows_through < index:
            self._assign_rows(self._rows_through + 1)
        record = self._records[index]
        return StepPlan(index=index, time_s=record.time_s, trains=self._trains(index),
                        applies=record.applies, stale=record.stale, lost=record.lost,
                        in_flight=record.in_flight,
                        trains_dropped=self._trains(index, STALE))

    def pending_after(self, index: int) -> list[Update]:
        """The updates trained by step ``index`` and applied by a later one (dispatch order):
        the rows a checkpoint written after step ``index`` must keep."""
        self.plan(index)
        return [u for version in range(index + 1) for u in self._trains(version)
                if u.step > index]

    def staleness_counts(self, through: int) -> dict[int, int]:
        """How many applied updates had each staleness, steps 0 to ``through``."""
        if through < 0:
            return {}
        self.plan(through)
        counts = Counter(u.staleness for record in self._records[:through + 1]
                         for u in record.applies)
        return dict(sorted(counts.items()))

    # -- the simulation ---------------------------------------------------------------------
    def _trains(self, version: int, fate: str = APPLIED) -> tuple[Update, ...]:
        return tuple(u for u in self._by_version.get(version, ()) if u.fate == fate)

    def _assign_rows(self, index: int) -> None:
        """Simulate until every update of version ``index`` has arrived, then free the
        rows step ``index - 1`` applied and give the version's applied updates theirs."""
        while len(self._records) <= index or \
                any(u.fate is None for u in self._by_version.get(index, ())):
            self._advance()
        if index > 0:
            for update in self._records[index - 1].applies:
                heapq.heappush(self._free_rows, update.row)
        for update in self._trains(index):
            update.row = heapq.heappop(self._free_rows)
        self._rows_through = index

    def _advance(self) -> None:
        """The next event: an update arriving, or a free slot looking again."""
        self._events_since_step += 1
        if self._events_since_step > MOST_EVENTS_PER_STEP or not self._heap:
            raise UserError(f"no server update in {MOST_EVENTS_PER_STEP:,} events after "
                            f"virtual second {self._now:,.0f}: the availability trace leaves "
                            "too few clients online to fill a buffer")
        time_s, kind, number = heapq.heappop(self._heap)
        self._now = time_s
        if kind == 1:
            self._retry_pending = False
        else:
            self._arrive(self._updates[number])
        self._refill()
        if self._stepped is not None:   # counted once its freed slots are filled again
            self._stepped.in_flight, self._stepped = len(self._in_flight), None

    def _arrive(self, update: Update) -> None:
        self._in_flight.discard(update.client)
        self._idle += 1
        if update.fate == LOST:
            self._lost.append(update)
            return
        update.staleness = self._version - update.version
        if self.max_staleness is not None and update.staleness > self.max_staleness:
            update.fate = STALE
            self._stale.append(update)
            return
        update.fate, update.step = APPLIED, self._version
        self._buffer.append(update)
        if len(self._buffer) == self.buffer_size:
            self._stepped = _Record(self._now, tuple(self._buffer), tuple(self._stale),
                                    tuple(self._lost))
            self._records.append(self._stepped)
            self._buffer, self._stale, self._lost = [], [], []
            self._version += 1
            self._this_version = set()
            self._events_since_step = 0

    def _refill(self) -> None:
        while self._idle:
            client = self._draw()
            if client is None:   # nobody available now: look again later
                if not self._retry_pending:
                    later = self.availability.next_online(self.clients, self._now)
                    heapq.heappush(self._heap, (later if later > self._now
                                                else self._now + RETRY_S, 1, -1))
                    self._retry_pending = True
                return
            self._dispatch(client)

    def _dispatch(self, client: int) -> None:
        number = len(self._updates)
        finish = self._now + float(self.duration(client))
        offline = self.availability.online_until(client, self._now) \
            if self.availability is not None else finish
        update = Update(number, client, self._version, self._now, min(finish, offline))
        if offline < finish:   # it goes offline first: its slot frees then
            update.fate = LOST
        self._updates.append(update)
        self._by_version.setdefault(self._version, []).append(update)
        heapq.heappush(self._heap, (finish, 0, number))
        self._in_flight.add(client)
        self._this_version.add(client)
        self._idle -= 1

    def _draw(self) -> int | None:
        """A client to dispatch now (None: none is available and free)."""
        for _ in range(DRAW_TRIES):
            client = self._rng.randrange(self.clients)
            if self._eligible(client, fresh=True):
                return client
        online = range(self.clients) if self.availability is None else \
            self.availability.available_clients(self.clients, self._now)
        for fresh in (True, False):
            choices = [c for c in online if self._free(c, fresh)]
            if choices:
                return self._rng.choice(choices)
        return None

    def _eligible(self, client: int, fresh: bool) -> bool:
        return self._free(client, fresh) \
            and (self.availability is None or self.availability.available(client, self._now))

    def _free(self, client: int, fresh: bool) -> bool:
        """Not training, and with ``fresh`` not yet drawn at this version."""
        return client not in self._in_flight and not (fresh and client in self._this_version)
