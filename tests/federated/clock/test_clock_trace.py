"""Availability traces of the virtual clock (``federated.clock.trace``): FedScale's
active/inactive windows, their period, updates lost mid-way, and the refusals."""

import json
import pickle

import pytest

from mptrain.errors import UserError
from mptrain.federated.clock.trace import ALWAYS_ONLINE, availability_trace


def _trace(tmp_path, entries, clients=3, cycle=False):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({str(k): v for k, v in entries.items()}))
    return availability_trace(f"{'cycle:' if cycle else ''}{path}", clients)


def test_without_a_trace_everyone_is_always_online():
    assert availability_trace(None, 5) is ALWAYS_ONLINE
    assert ALWAYS_ONLINE.available(3, 1e9) and ALWAYS_ONLINE.online_through(3, 0, 1e9)
    assert ALWAYS_ONLINE.available_clients(3, 7.0) == [0, 1, 2]


def test_windows_repeat_every_period(tmp_path):
    trace = _trace(tmp_path, {1: {"active": [10, 50], "inactive": [20, 60],
                                  "finish_time": 100, "duration": 5, "model": "x"}})
    assert [trace.available(1, t) for t in (5, 10, 20, 21, 55, 110, 155, 165)] == \
        [False, True, True, False, True, True, True, False]
    assert trace.available(0, 5) and trace.available(2, 5)     # not in the file: online
    assert trace.available_clients(3, 5) == [0, 2]


def test_an_update_outliving_its_window_is_lost(tmp_path):
    trace = _trace(tmp_path, {0: {"active": [10], "inactive": [20], "finish_time": 100}})
    assert trace.online_through(0, 12, 20) and trace.online_through(0, 112, 119)
    assert not trace.online_through(0, 12, 21)
    assert not trace.online_through(0, 5, 12)                  # offline at the start


def test_a_window_through_the_period_end_continues_into_the_next(tmp_path):
    trace = _trace(tmp_path, {0: {"active": [0, 80], "inactive": [10, 100],
                                  "finish_time": 100}})
    assert trace.online_through(0, 90, 110) and not trace.online_through(0, 90, 111)
    always = _trace(tmp_path, {0: {"active": [0], "inactive": [100], "finish_time": 100}})
    assert always.online_through(0, 50, 1e6)


def test_overlapping_windows_merge_and_period_defaults_to_last_end(tmp_path):
    trace = _trace(tmp_path, {0: {"active": [30, 5], "inactive": [40, 35]}})
    assert trace.online_through(0, 6, 40) and not trace.available(0, 41)   # period 40


def test_cycled_trace_deals_profiles_in_turn(tmp_path):
    entries = {5: {"active": [0], "inactive": [1], "finish_time": 10},
               9: {"active": [5], "inactive": [6], "finish_time": 10}}
    trace = _trace(tmp_path, entries, clients=3, cycle=True)
    assert [trace.available(c, 0.5) for c in range(3)] == [True, False, True]


def test_fedscale_pickle(tmp_path):
    path = tmp_path / "client_behave_trace"
    path.write_bytes(pickle.dumps({0: {"active": [0.0], "inactive": [1.0],
                                       "finish_time": 2.0}}, protocol=2))
    assert not availability_trace(str(path), 1).available(0, 1.5)


@pytest.mark.parametrize("entry, match", [
    ({"active": [0, 1], "inactive": [2]}, "one length"),
    ({"active": [5], "inactive": [2]}, "ends before"),
    ({"active": [-1], "inactive": [2]}, "non-negative"),
    ({"active": [0], "inactive": [2], "finish_time": 0}, "finish_time"),
    ({"active": [50], "inactive": [60], "finish_time": 10}, "no window"),
    ([0, 1], "expected"),
])
def test_bad_entries_are_refused(tmp_path, entry, match):
    with pytest.raises(UserError, match=match):
        _trace(tmp_path, {0: entry})


def test_a_trace_naming_unknown_clients_is_refused(tmp_path):
    with pytest.raises(UserError, match="unknown client 3.*cycle:"):
        _trace(tmp_path, {3: {"active": [0], "inactive": [1]}}, clients=3)
    with pytest.raises(UserError, match="non-negative integers"):
        _trace(tmp_path, {"phone": {"active": [0], "inactive": [1]}})


def test_when_a_client_leaves_and_comes_back(tmp_path):
    trace = _trace(tmp_path, {0: {"active": [10, 50], "inactive": [20, 60],
                                  "finish_time": 100}}, clients=1)
    assert trace.online_until(0, 12) == 20 and trace.online_until(0, 30) == 30
    assert trace.next_online(1, 30) == 50 and trace.next_online(1, 70) == 110
    assert trace.next_online(1, 15) == 15
    partial = _trace(tmp_path, {0: {"active": [10], "inactive": [20]}}, clients=2)
    assert partial.next_online(2, 25) == 25          # client 1 has no trace: always online


def test_every_client_at_once_agrees_with_each_alone(tmp_path):
    import random

    rng = random.Random(5)
    entries = {}
    for client in range(0, 300, 2):          # odd clients: no trace, always online
        cuts = sorted(rng.uniform(0, 1000) for _ in range(2 * rng.randint(1, 4)))
        entries[client] = {"active": cuts[0::2], "inactive": cuts[1::2],
                           "finish_time": rng.choice([1000, 1500, 86400])}
    entries[4] = {"active": [0, 500], "inactive": [200, 1000], "finish_time": 1000}
    trace = _trace(tmp_path, entries, clients=300)
    for t in [0.0, 200.0, 500.0, 999.999, 1000.0, 12345.6, 86400.0 * 3 + 17]:
        assert trace.available_clients(250, t) == \
            [c for c in range(250) if trace.available(c, t)], t
