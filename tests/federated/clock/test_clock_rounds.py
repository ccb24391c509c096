"""A synchronous round on the virtual clock (``federated.clock.rounds.time_round``): the
slowest client, the deadline, over-selection, dropouts and clients going offline."""

import json

from mptrain.federated.clock.rounds import ClientRun, time_round
from mptrain.federated.clock.trace import availability_trace

RUNS = [ClientRun(3, 5.0), ClientRun(1, 2.0), ClientRun(7, 9.0), ClientRun(4, 2.0)]


def test_a_round_lasts_as_long_as_its_slowest_client():
    timing = time_round(RUNS, start_s=100.0)
    assert timing.trained == (1, 3, 4, 7) and timing.duration_s == 9.0
    assert timing.late == timing.offline == timing.cancelled == ()


def test_a_deadline_drops_the_late_and_the_round_lasts_until_it():
    timing = time_round(RUNS, 0.0, deadline_s=6.0)
    assert timing.trained == (1, 3, 4) and timing.late == (7,) and timing.duration_s == 6.0
    assert time_round(RUNS, 0.0, deadline_s=9.0).late == ()     # on time is in time


def test_over_selection_keeps_the_first_to_report_and_cancels_the_rest():
    timing = time_round(RUNS, 0.0, wanted=2)
    assert timing.trained == (1, 4) and timing.cancelled == (3, 7)
    assert timing.duration_s == 2.0
    tie = time_round(RUNS, 0.0, wanted=1)                     # a tie goes to the lower id
    assert tie.trained == (1,) and tie.cancelled == (3, 4, 7)
    short = time_round(RUNS, 0.0, deadline_s=4.0, wanted=3)   # too few by the deadline
    assert short.trained == (1, 4) and short.late == (3, 7) and short.duration_s == 4.0


def test_a_dropout_holds_the_round_but_does_not_count_as_a_report():
    runs = [ClientRun(1, 2.0, reports=False), ClientRun(2, 3.0), ClientRun(3, 4.0)]
    timing = time_round(runs, 0.0, wanted=1)
    assert timing.trained == (1, 2) and timing.cancelled == (3,)
    assert timing.duration_s == 3.0


def test_a_client_going_offline_mid_update_is_lost(tmp_path):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"3": {"active": [0], "inactive": [13], "finish_time": 100},
                                "7": {"active": [0], "inactive": [50], "finish_time": 100}}))
    trace = availability_trace(str(path), 8)
    timing = time_round(RUNS, 10.0, trace)
    # client 3 needs until 15 but leaves at 13; the round ends with client 7 at 19
    assert timing.offline == (3,) and timing.trained == (1, 4, 7)
    assert timing.duration_s == 9.0
    alone = time_round([ClientRun(3, 5.0)], 10.0, trace)
    assert alone.offline == (3,) and alone.duration_s == 3.0  # the server sees it leave


def test_no_candidates_take_no_time():
    timing = time_round([], 5.0, deadline_s=3.0)
    assert timing.trained == () and timing.duration_s == 0.0
