"""FedBuff's event schedule without processes: seeded, in virtual-time order, staleness and
buffers as the algorithm defines them, rows within the pending table, availability."""

import math

import pytest

from mptrain.errors import UserError
from mptrain.federated.asynchronous.schedule import APPLIED, LOST, STALE, EventSchedule


def durations(client):
    return 1.0 + (client * 7919 % 13) / 3.0   # 1 .. 5 virtual seconds, uneven


def schedule(**options):
    settings = dict(clients=20, concurrency=6, buffer_size=3, duration=durations, seed=0)
    return EventSchedule(**{**settings, **options})


def updates_through(s, steps):
    plans = [s.plan(i) for i in range(steps)]
    return plans, [u for p in plans for u in p.applies]


def test_the_same_seed_gives_the_same_events_and_another_seed_others():
    def events(seed):
        plans, _ = updates_through(schedule(seed=seed), 8)
        return [(p.time_s, [(u.client, u.version, u.staleness, u.row) for u in p.applies],
                 [(u.client, u.row) for u in p.trains]) for p in plans]

    assert events(0) == events(0)
    assert events(0) != events(1)


def test_steps_apply_full_buffers_in_arrival_order_with_their_staleness():
    plans, applied = updates_through(schedule(), 10)
    for plan in plans:
        assert len(plan.applies) == 3
        arrivals = [u.finish_s for u in plan.applies]
        assert arrivals == sorted(arrivals) and plan.time_s == arrivals[-1]
        for update in plan.applies:
            assert update.fate == APPLIED and update.step == plan.index
            assert update.staleness == plan.index - update.version >= 0
            assert update.finish_s == update.start_s + durations(update.client)
    assert [p.time_s for p in plans] == sorted(p.time_s for p in plans)
    assert any(u.staleness > 0 for u in applied)   # uneven speeds make stale updates


def test_clients_train_from_the_version_of_their_dispatch_and_keep_k_in_flight():
    plans, _ = updates_through(schedule(), 10)
    # Version 0: the first K, then one for each arrival before the first step.
    assert len(plans[0].trains) == 6 + 3 - 1
    for plan in plans:
        assert all(u.version == plan.index for u in plan.trains)
        assert plan.in_flight == 6
        assert len({u.client for u in plan.trains}) == len(plan.trains)  # once a version
    assert sum(len(p.trains) for p in plans[1:]) == 3 * 9


def test_rows_stay_within_the_table_and_never_hold_two_pending_updates():
    s = schedule(concurrency=8, buffer_size=2)
    held = {}
    for index in range(30):
        plan = s.plan(index)
        for update in plan.trains:
            assert 0 <= update.row < s.rows == 10
            assert update.row not in held, "a row still holds an update not yet applied"
            held[update.row] = update.number
        for update in plan.applies:
            assert held.pop(update.row) == update.number
        assert sorted(held) == sorted(u.row for u in s.pending_after(index))


def test_max_staleness_drops_older_updates_untrained():
    s = schedule(max_staleness=0)
    plans, applied = updates_through(s, 8)
    assert all(u.staleness == 0 for u in applied)
    stale = [u for p in plans for u in p.stale]
    assert stale and all(u.fate == STALE and u.staleness > 0 and u.row is None for u in stale)
    assert not any(u.fate == STALE for p in plans for u in p.trains)


def test_buffer_one_steps_at_every_arrival():
    plans, applied = updates_through(schedule(buffer_size=1), 12)
    assert [len(p.applies) for p in plans] == [1] * 12
    assert [u.finish_s for u in applied] == sorted(u.finish_s for u in applied)


def test_the_staleness_histogram_counts_the_applied_updates():
    s = schedule()
    _, applied = updates_through(s, 7)
    counts = s.staleness_counts(6)
    assert sum(counts.values()) == 21
    assert counts == {k: sum(u.staleness == k for u in applied) for k in counts}


class Trace:
    """Client 0..9 online always; 10..19 offline from virtual second 4 on."""

    def available(self, client, t):
        return client < 10 or t < 4

    def online_until(self, client, t):
        return math.inf if client < 10 else max(t, 4.0)

    def next_online(self, clients, t):
        return t

    def available_clients(self, clients, t):
        return [c for c in range(clients) if self.available(c, t)]


def test_an_offline_client_is_not_sampled_and_one_going_offline_is_lost():
    s = schedule(availability=Trace())
    plans, applied = updates_through(s, 10)
    lost = [u for p in plans for u in p.lost]
    # Lost when it goes offline: its slot frees at second 4, not when it would have ended.
    assert lost and all(u.fate == LOST and u.client >= 10 and u.finish_s == 4 for u in lost)
    assert any(u.start_s + durations(u.client) > 4 for u in lost)
    assert all(u.client < 10 for u in applied if u.start_s >= 4)
    assert not any(u.fate == LOST for p in plans for u in p.trains)


class Nobody:
    """Everyone online the first half second of every minute, too short for any update."""

    def available(self, client, t):
        return t % 60 < 0.5

    def online_until(self, client, t):
        return t - t % 60 + 0.5 if t % 60 < 0.5 else t

    def next_online(self, clients, t):
        return t if t % 60 < 0.5 else t - t % 60 + 60

    def available_clients(self, clients, t):
        return [c for c in range(clients) if self.available(c, t)]


def test_a_trace_that_never_fills_a_buffer_is_refused(monkeypatch):
    from mptrain.federated.asynchronous import schedule as module

    monkeypatch.setattr(module, "MOST_EVENTS_PER_STEP", 500)
    with pytest.raises(UserError, match="too few clients online"):
        schedule(availability=Nobody()).plan(0)


class Nightly:
    """Every client offline from second 2 to second 100."""

    def available(self, client, t):
        return not 2 <= t < 100

    def online_until(self, client, t):
        return t if 2 <= t < 100 else (2.0 if t < 2 else math.inf)

    def next_online(self, clients, t):
        return 100.0 if 2 <= t < 100 else t

    def available_clients(self, clients, t):
        return [c for c in range(clients) if self.available(c, t)]


def test_a_free_slot_waits_for_the_next_client_online():
    s = schedule(availability=Nightly())
    plans, applied = updates_through(s, 4)
    late = [u for u in applied if u.start_s >= 2]
    assert late and all(u.start_s >= 100 for u in late)


def test_bad_sizes_are_a_programming_error():
    with pytest.raises(ValueError):
        schedule(buffer_size=7)
    with pytest.raises(ValueError):
        schedule(concurrency=21)
