"""``--straggler-mode exact`` in real fedavg runs: exactly the paper's share of every
round's clients straggle, in whole local epochs, the same whatever --workers and on the
stacked path as one client at a time; the setting travels by flag, config file and fit()."""

import copy

import pytest
import torch

import mptrain
from mptrain.errors import UserError

from fedavg_workload import RUN, make_data, make_model, make_test_data

#: 4 clients a round at P = 0.75: round(4 x 0.25) = 1 finishes, 3 straggle.
EXACT = dict(straggler_rate=0.75, straggler_mode="exact", local_epochs=3)
SAMPLES_PER_CLIENT = 20    # fedavg_workload: 240 samples over 12 clients


def fit(model, **options):
    return mptrain.fit(model, make_data(), make_test_data(),
                       **{**RUN, "workers": 1, **EXACT, **options})


@pytest.mark.timeout(180)
def test_exactly_three_of_four_straggle_each_round_the_same_whatever_the_workers():
    initial = make_model()
    one = fit(copy.deepcopy(initial), workers=1, vectorize_clients="off")
    two = fit(copy.deepcopy(initial), workers=2, vectorize_clients="off")
    for round_one, round_two in zip(one.rounds, two.rounds):
        assert round_one.extras["partial"] == round_two.extras["partial"] == 3
        # whole epochs: every client's samples are a multiple of its 20
        assert round_one.train_samples % SAMPLES_PER_CLIENT == 0
        assert round_one.train_samples == round_two.train_samples
    for name, tensor in one.model.state_dict().items():
        assert torch.equal(tensor, two.model.state_dict()[name]), name
    assert one.summary["straggler_mode"] == "exact"


@pytest.mark.timeout(180)
def test_stacked_clients_straggle_as_those_trained_one_at_a_time():
    initial = make_model()
    off = fit(copy.deepcopy(initial), vectorize_clients="off")
    on = fit(copy.deepcopy(initial), vectorize_clients="on")
    assert on.summary["client_path"].startswith("vectorized")
    assert [r.train_samples for r in on.rounds] == [r.train_samples for r in off.rounds]
    assert [r.extras["partial"] for r in on.rounds] == [3] * RUN["rounds"]
    for name, tensor in on.model.state_dict().items():
        torch.testing.assert_close(tensor, off.model.state_dict()[name], atol=1e-5, rtol=0)


@pytest.mark.parametrize("options, needle", [
    (dict(straggler_rate=0.0), "--straggler-mode exact decides which clients"),
    (dict(local_epochs=1), "a straggler does 1 to E-1 whole local epochs"),
])
def test_exact_without_stragglers_or_epochs_to_cut_is_one_line(tmp_path, capsys, options,
                                                                needle):
    from user_errors import fail

    settings = {**EXACT, **options}
    toml = tmp_path / "run.toml"   # the mode from a config file, the rest as flags
    toml.write_text('straggler-mode = "exact"\n')
    err = fail(["run", "--strategy", "fedavg", "--config", str(toml),
                "--straggler-rate", str(settings["straggler_rate"]),
                "--local-epochs", str(settings["local_epochs"]),
                "--out", str(tmp_path / "never")], capsys)
    assert needle in err
    with pytest.raises(UserError, match="^straggler_mode exact"):   # fit()'s words
        fit(make_model(), **options)


def test_exact_stragglers_with_the_virtual_clock_is_one_line(tmp_path, capsys):
    """The clock samples among the clients online and over-selected, which the exact draw
    (among the round's plain sample) would not see: refused rather than wrong."""
    from user_errors import fail

    err = fail(["run", "--strategy", "fedavg", "--straggler-mode", "exact",
                "--straggler-rate", "0.5", "--local-epochs", "2",
                "--client-speeds", "constant", "--out", str(tmp_path / "never")], capsys)
    assert "with the clock" in err
