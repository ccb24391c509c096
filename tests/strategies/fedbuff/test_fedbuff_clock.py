"""fedbuff on the virtual clock, without processes: the clock's settings shape the schedule
every process computes (durations from --client-speeds, clients lost to
--availability-trace)."""

import json

import pytest

from mptrain.config import TrainConfig
from mptrain.federated.clock.speeds import DEFAULT_DOWN_BYTES_PER_S, DEFAULT_UP_BYTES_PER_S
from mptrain.strategies.fedbuff.clock import event_schedule

SETTINGS = {"strategy": "fedbuff", "clients": 12, "concurrency": 4, "buffer_size": 2,
            "local_epochs": 2}


def schedule(sizes, **settings):
    config = TrainConfig.from_settings({**SETTINGS, **settings})
    return event_schedule(config, sizes, model_bytes=4000)


def test_an_update_takes_the_clocks_seconds():
    plan = schedule([20] * 12, client_speeds="constant:5").plan(0)
    seconds = 20 * 2 * 0.005 + 4000 * (1 / DEFAULT_UP_BYTES_PER_S + 1 / DEFAULT_DOWN_BYTES_PER_S)
    assert all(u.finish_s - u.start_s == pytest.approx(seconds) for u in plan.applies)
    assert plan.time_s == pytest.approx(seconds)   # the first four arrive together


def test_the_default_speeds_are_the_clocks_and_seeded():
    first = [u.finish_s for u in schedule(list(range(5, 17))).plan(3).applies]
    assert first == [u.finish_s for u in schedule(list(range(5, 17))).plan(3).applies]
    assert first != [u.finish_s for u in schedule(list(range(5, 17)), seed=1).plan(3).applies]


def test_clients_offline_are_not_drawn_and_those_leaving_are_lost(tmp_path):
    # Clients 0-5 online for the first half second of every 100; 6-11 always (unnamed).
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({str(c): {"active": [0], "inactive": [0.5],
                                          "finish_time": 100} for c in range(6)}))
    s = schedule([100] * 12, client_speeds="constant:5", availability_trace=str(trace))
    plans = [s.plan(i) for i in range(6)]
    lost = [u for p in plans for u in p.lost]
    assert lost and all(u.client < 6 and u.finish_s == pytest.approx(0.5) for u in lost)
    assert all(u.client >= 6 for p in plans for u in p.applies)
