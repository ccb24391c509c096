"""Client speeds of the virtual clock (``federated.clock.speeds``): the specs, the seeded
draw, FedScale's file layout read without running code, and an update's duration."""

import json
import pickle

import numpy as np
import pytest

from mptrain.errors import UserError
from mptrain.federated.clock.speeds import (DEFAULT_DOWN_BYTES_PER_S, DEFAULT_UP_BYTES_PER_S,
                                            ClientSpeeds, client_speeds)


def test_update_seconds_is_compute_plus_both_transfers():
    speeds = ClientSpeeds(np.array([0.01, 0.02]), np.array([100.0, 50.0]),
                          np.array([200.0, 100.0]))
    # 30 samples x 2 epochs x 0.02 s + 1000 bytes x (1/50 + 1/100)
    assert speeds.update_seconds(1, 30, 2, 1000) == pytest.approx(1.2 + 30.0)
    assert speeds.update_seconds(0, 10, 0.5, 0) == pytest.approx(0.05)


def test_lognormal_is_seeded_and_matches_fedscale_scale():
    first = client_speeds("lognormal:1,0.6", 2000, seed=3)
    again = client_speeds("lognormal", 2000, seed=3)          # 1,0.6 is the default
    other = client_speeds("lognormal:1,0.6", 2000, seed=4)
    assert np.array_equal(first.compute_s_per_sample, again.compute_s_per_sample)
    assert not np.array_equal(first.compute_s_per_sample, other.compute_s_per_sample)
    # median of lognormal(1, 0.6) x 5 ms is e x 5 ms
    assert np.median(first.compute_s_per_sample) == pytest.approx(np.e * 0.005, rel=0.05)
    assert np.all(first.up_bytes_per_s == DEFAULT_UP_BYTES_PER_S)
    assert np.all(first.down_bytes_per_s == DEFAULT_DOWN_BYTES_PER_S)


def test_constant_speeds():
    speeds = client_speeds("constant:2", 3, seed=0)
    assert np.all(speeds.compute_s_per_sample == 0.002)
    assert np.all(client_speeds("constant", 3, 0).compute_s_per_sample == 0.005)


@pytest.mark.parametrize("spec", ["lognormal:1", "lognormal:1,x", "lognormal:1,-0.5",
                                  "constant:0", "constant:-3", "constant:nan", "fast", "",
                                  "uniform:1,2"])
def test_bad_specs_are_refused(spec):
    with pytest.raises(UserError):
        client_speeds(spec, 4, 0)


def _fedscale(tmp_path, entries, name="capacity.json"):
    path = tmp_path / name
    path.write_text(json.dumps({str(k): v for k, v in entries.items()}))
    return str(path)


def test_file_per_client_and_cycled(tmp_path):
    entries = {0: {"computation": 10, "communication": 8000},
               1: {"computation": 20, "communication": 800}}
    path = _fedscale(tmp_path, entries)
    speeds = client_speeds(path, 2, seed=0)
    # training is 3x inference; kbps -> bytes/s
    assert list(speeds.compute_s_per_sample) == [0.03, 0.06]
    assert list(speeds.up_bytes_per_s) == [1e6, 1e5] == list(speeds.down_bytes_per_s)
    cycled = client_speeds(f"cycle:{path}", 5, seed=0)
    assert list(cycled.compute_s_per_sample) == [0.03, 0.06, 0.03, 0.06, 0.03]


def test_file_naming_unknown_or_missing_clients_is_refused(tmp_path):
    path = _fedscale(tmp_path, {0: {"computation": 1, "communication": 1},
                                7: {"computation": 1, "communication": 1}})
    with pytest.raises(UserError, match="unknown client 7"):
        client_speeds(path, 2, 0)
    with pytest.raises(UserError, match="lacks 1 of"):
        client_speeds(_fedscale(tmp_path, {0: {"computation": 1, "communication": 1}}), 2, 0)


@pytest.mark.parametrize("entry", [{"computation": 0, "communication": 1},
                                   {"computation": -1, "communication": 1},
                                   {"computation": 1}, {"computation": 1, "communication": "9"}])
def test_file_with_bad_speeds_is_refused(tmp_path, entry):
    with pytest.raises(UserError, match="positive number"):
        client_speeds(_fedscale(tmp_path, {0: entry}), 1, 0)


def test_csv_file(tmp_path):
    path = tmp_path / "speeds.csv"
    path.write_text("client_id,computation,communication\n0,10,8000\n1,20,800\n")
    assert list(client_speeds(str(path), 2, 0).compute_s_per_sample) == [0.03, 0.06]


def test_fedscale_pickle_of_plain_data_is_read(tmp_path):
    path = tmp_path / "client_device_capacity"
    path.write_bytes(pickle.dumps({1: {"computation": 10.0, "communication": 8000.0}}))
    assert list(client_speeds(f"cycle:{path}", 2, 0).compute_s_per_sample) == [0.03, 0.03]


class _RunsCode:
    def __reduce__(self):
        return (print, ("a pickle ran code",))


def test_a_pickle_that_would_run_code_is_refused(tmp_path, capsys):
    path = tmp_path / "evil.pkl"
    path.write_bytes(pickle.dumps({0: _RunsCode()}))
    with pytest.raises(UserError, match="builtins.print.*convert it to JSON"):
        client_speeds(str(path), 1, 0)
    assert "ran code" not in capsys.readouterr().out


def test_missing_file_is_one_line(tmp_path):
    with pytest.raises(UserError, match="cannot read"):
        client_speeds(str(tmp_path / "nope.json"), 1, 0)
