"""When each client is online: :class:`AvailabilityTrace`, and ``--availability-trace``.

FedScale's ``client_behave_trace`` layout: ``{id: {"active": [t, ...], "inactive": [t, ...],
"finish_time": T}}`` in seconds -- the client is online from each ``active[i]`` to the
matching ``inactive[i]`` (both ends included, as FedScale's ``is_active``), and the pattern
repeats every ``finish_time`` seconds (FedScale's traces span 48 hours). Other fields
(``duration``, ``model``) are ignored; without ``finish_time`` the period is the last
``inactive``.

``FILE`` names clients of the run by id; a client it does not name is always online, and one
it names that the run does not have is refused. ``cycle:FILE`` deals the file's traces to
the clients in turn, client ``c`` the ``(c mod n)``-th in increasing id order (FedScale's
rule). Read without running code (``files``: JSON, or FedScale's pickle as plain data).
Without a trace every client is always online.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from ...errors import UserError
from ...errors import setting_name as named   # as the caller spelled the setting
from .files import client_id, read_mapping

CYCLE_PREFIX = "cycle:"


def _what() -> str:
    return f"{named('availability_trace')} file"


@dataclass(frozen=True)
class ClientWindows:
    """One client's online windows within a period: sorted, disjoint ``[start, end]``."""

    period: float
    starts: tuple[float, ...]
    ends: tuple[float, ...]

    def _window(self, phase: float) -> int | None:
        """The index of the window holding ``phase`` (in [0, period)), or None."""
        i = bisect.bisect_right(self.starts, phase) - 1
        return i if i >= 0 and phase <= self.ends[i] else None

    def available(self, t: float) -> bool:
        return self._window(t % self.period) is not None

    def online_until(self, t: float) -> float:
        """When the client, online at ``t``, goes offline (``t`` itself when it is offline
        then; infinity when it never does)."""
        phase = t % self.period
        i = self._window(phase)
        if i is None:
            return t
        run_end = self.ends[i]
        if run_end >= self.period and self.starts[0] <= 0:   # the window wraps into the next
            if i == 0:
                return math.inf                               # online the whole period
            run_end = self.period + self.ends[0]
        return t + (run_end - phase)

    def next_online(self, t: float) -> float:
        """The first moment from ``t`` on that the client is online."""
        phase = t % self.period
        if self._window(phase) is not None:
            return t
        i = bisect.bisect_right(self.starts, phase)
        start = self.starts[i] if i < len(self.starts) else self.period + self.starts[0]
        return t + (start - phase)


@dataclass(frozen=True)
class AvailabilityTrace:
    """Which clients are online when; a client without windows is always online."""

    windows: dict[int, ClientWindows] = field(default_factory=dict)
    description: str = ""

    def available(self, client: int, t: float) -> bool:
        """Whether ``client`` is online at virtual time ``t`` (seconds)."""
        w = self.windows.get(client)
        return w is None or w.available(t)

    def online_through(self, client: int, t0: float, t1: float) -> bool:
        """Whether ``client`` stays online from ``t0`` to ``t1`` (an update that starts at
        ``t0`` and reports at ``t1`` is lost otherwise)."""
        return t1 <= self.online_until(client, t0)

    def online_until(self, client: int, t: float) -> float:
        """When ``client``, online at ``t``, goes offline (infinity: never; ``t``: it is
        offline at ``t``)."""
        w = self.windows.get(client)
        return math.inf if w is None else w.online_until(t)

    def next_online(self, clients: int, t: float) -> float:
        """The first moment from ``t`` on that any of ``range(clients)`` is online (a server
        with nobody to sample waits until then)."""
        if len(self.windows) < clients:
            return t                      # someone without a trace: always online
        return min(w.next_online(t) for c, w in self.windows.items() if c < clients)

    def available_clients(self, clients: int, t: float) -> list[int]:
        """The ids among ``range(clients)`` online at ``t``, increasing: ``available`` for
        every client at once, in numpy (100,000 traced clients: one search, no loop)."""
        if not self.windows:
            return list(range(clients))
        ids, periods, span, keys, owners, starts, ends = self._flat
        rank = np.arange(len(ids))
        phase = np.mod(t, periods)
        # Each traced client's window at or before its phase: one search over every window,
        # keyed (client, start) as rank x span + start. The sum may round by an ulp, so the
        # windows beside the one found are checked too, exactly.
        found = np.searchsorted(keys, rank * span + phase, side="right") - 1
        online = np.zeros(len(ids), dtype=bool)
        for shift in (-1, 0, 1):
            i = np.clip(found + shift, 0, len(keys) - 1)
            online |= (owners[i] == rank) & (starts[i] <= phase) & (phase <= ends[i])
        result = np.ones(clients, dtype=bool)
        inside = ids < clients
        result[ids[inside]] = online[inside]
        return np.flatnonzero(result).tolist()

    @cached_property
    def _flat(self):
        """Every window of every traced client in flat arrays, by client then start."""
        ids = np.array(sorted(self.windows), dtype=np.int64)
        chosen = [self.windows[c] for c in ids.tolist()]
        periods = np.array([w.period for w in chosen])
        starts = np.concatenate([np.array(w.starts) for w in chosen])
        ends = np.concatenate([np.array(w.ends) for w in chosen])
        owners = np.repeat(np.arange(len(ids)), [len(w.starts) for w in chosen])
        span = 2.0 * float(periods.max()) + 1.0      # above any phase: clients never mix
        return ids, periods, span, owners * span + starts, owners, starts, ends


ALWAYS_ONLINE = AvailabilityTrace()


def availability_trace(spec: str | None, clients: int) -> AvailabilityTrace:
    """The trace ``--availability-trace SPEC`` gives ``clients`` clients (None: none)."""
    if spec is None:
        return ALWAYS_ONLINE
    if not isinstance(spec, str) or not spec.strip():
        raise UserError(f"{named('availability_trace')} must be a file, got {spec!r}")
    cycle = spec.startswith(CYCLE_PREFIX)
    path = spec[len(CYCLE_PREFIX):] if cycle else spec
    data = read_mapping(path, _what())
    parsed = dict(sorted((client_id(key, path, _what()), client_windows(entry, key, path))
                         for key, entry in data.items()))
    if not parsed:
        raise UserError(f"{_what()} {path}: holds no clients")
    if cycle:
        ids = list(parsed)
        windows = {c: parsed[ids[c % len(ids)]] for c in range(clients)}
    else:
        unknown = [i for i in parsed if i >= clients]
        if unknown:
            raise UserError(f"{_what()} {path}: names unknown client {unknown[0]} (the run has "
                            f"clients 0-{clients - 1}); use cycle:{path} to deal its traces "
                            "to the clients in turn")
        windows = parsed
    return AvailabilityTrace(windows, spec)


def client_windows(entry, key, path) -> ClientWindows:
    """One client's entry checked and merged into disjoint windows."""
    where = f"{_what()} {path}: client {key}"
    if not isinstance(entry, dict):
        raise UserError(f"{where}: expected {{'active': [...], 'inactive': [...]}}")
    active, inactive = entry.get("active"), entry.get("inactive")
    if not isinstance(active, (list, tuple)) or not isinstance(inactive, (list, tuple)) \
            or len(active) != len(inactive) or not active:
        raise UserError(f"{where}: 'active' and 'inactive' must be lists of one length "
                        "(each window's start and end, seconds)")
    for value in (*active, *inactive):
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value) or value < 0:
            raise UserError(f"{where}: times must be non-negative numbers, got {value!r}")
    pairs = sorted(zip(map(float, active), map(float, inactive)))
    if any(end < start for start, end in pairs):
        raise UserError(f"{where}: a window ends before it starts")
    period = entry.get("finish_time", max(end for _, end in pairs))
    if isinstance(period, bool) or not isinstance(period, (int, float)) \
            or not math.isfinite(period) or period <= 0:
        raise UserError(f"{where}: 'finish_time' must be a positive number, got {period!r}")
    period = float(period)
    merged: list[list[float]] = []
    for start, end in pairs:
        if start >= period:
            continue                       # past the period: never reached
        end = min(end, period)
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    if not merged:
        raise UserError(f"{where}: no window starts within the period ({period:g} s)")
    return ClientWindows(period, tuple(s for s, _ in merged), tuple(e for _, e in merged))
