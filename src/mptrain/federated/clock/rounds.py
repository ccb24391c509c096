"""A synchronous round on the virtual clock: which of its clients the server hears from in
time, and how long the round lasts (:func:`time_round`).

Every candidate starts when the round starts (it downloads the model, trains, uploads) and
its run ends in one event, at ``start + seconds`` -- it reports, or, a dropout, closes its
connection without reporting -- unless it goes offline first (the trace), which ends it
then, lost. The server ends the round

- when ``wanted`` reports have arrived (over-selection, Bonawitz et al. 2019: the clients
  still running are told to stop, their work cancelled), else
- when every candidate's run has ended, but not later than ``deadline_s`` after the start:
  the runs still going then are late and dropped.

So the round lasts as long as its slowest client, or its deadline, or its ``wanted``-th
report. The events are ordered by time, ties by client id: the same inputs give the same
round, whichever process computes it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from .trace import ALWAYS_ONLINE, AvailabilityTrace


@dataclass(frozen=True)
class ClientRun:
    """One candidate's update as the clock sees it."""

    client: int
    seconds: float          # download + train + upload
    reports: bool = True    # False: it trains but never reports (a dropout)


@dataclass(frozen=True)
class RoundTiming:
    """What the clock decided about one round's candidates (ids increasing)."""

    trained: tuple[int, ...]     # ran to the end within the round: reporters and dropouts
    late: tuple[int, ...]        # still running at the deadline: dropped
    offline: tuple[int, ...]     # went offline during their update: lost
    cancelled: tuple[int, ...]   # over-selected, still running when enough had reported
    duration_s: float


def time_round(runs: Sequence[ClientRun], start_s: float,
               trace: AvailabilityTrace = ALWAYS_ONLINE, deadline_s: float | None = None,
               wanted: int | None = None) -> RoundTiming:
    """The round ``runs`` make from ``start_s`` (see the module); ``wanted``: the reports
    that close it early (None: wait for every run)."""
    deadline = math.inf if deadline_s is None else deadline_s
    # (when the run ends, relative to the start; client; how it ends)
    events = []
    for run in runs:
        finish = run.seconds
        gone = trace.online_until(run.client, start_s) - start_s
        ends = "finished" if finish <= gone else "offline"
        events.append((min(finish, gone), run.client, ends, run.reports))
    events.sort()
    trained, offline, late, cancelled = [], [], [], []
    reports, end = 0, 0.0
    closed = False
    for when, client, ends, reporting in events:
        if closed:
            cancelled.append(client)
        elif when > deadline:
            late.append(client)
        else:
            end = when
            if ends == "offline":
                offline.append(client)
                continue
            trained.append(client)
            reports += int(reporting)
            closed = wanted is not None and reports >= wanted
    if late:
        end = deadline
    return RoundTiming(tuple(sorted(trained)), tuple(sorted(late)), tuple(sorted(offline)),
                       tuple(sorted(cancelled)), end)
