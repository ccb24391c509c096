"""What fit() told a new user on the second tour (issue 57) that could say the fix: float
class labels, a partition function given as a function, and whether fit() prints."""

import pytest
import torch
import torch.nn as nn
from torch.utils.data import TensorDataset

import mptrain
from mptrain.errors import UserError

pytestmark = pytest.mark.timeout(120)


def labelled(samples=64):
    inputs = torch.randn(samples, 8, generator=torch.Generator().manual_seed(0))
    return inputs, (inputs[:, 0] > 0).long()


def test_float_class_labels_are_told_that_floats_mean_regression():
    # It said only "it must return [batch, 1]": the model was right, the labels were not.
    inputs, labels = labelled()
    with pytest.raises(UserError) as caught:
        mptrain.fit(nn.Linear(8, 2), TensorDataset(inputs, labels.float()), epochs=1)
    assert str(caught.value).endswith("float targets mean regression: for classes give "
                                      "integer targets (y.long())")


def test_real_valued_targets_are_not_told_about_classes():
    inputs, _ = labelled()
    with pytest.raises(UserError) as caught:
        mptrain.fit(nn.Linear(8, 2), TensorDataset(inputs, inputs[:, 0] * 0.5), epochs=1)
    assert "y.long()" not in str(caught.value)


def split_in_two(targets, clients, seed):
    """Clients of the even and of the odd samples."""
    indices = torch.arange(len(targets))
    return [indices[client::clients] for client in range(clients)]


@pytest.mark.parametrize("function", [split_in_two,
                                      lambda targets, clients, seed: split_in_two(
                                          targets, clients, seed)])
def test_fit_takes_a_partition_function_itself(function):
    # It was refused: "partition is a function (...) where a name is expected".
    inputs, labels = labelled()
    result = mptrain.fit(nn.Linear(8, 2), TensorDataset(inputs, labels), strategy="fedavg",
                         workers=1, clients=2, clients_per_round=2, rounds=1, partition=function,
                         start_method="fork", threads_per_worker=1)
    where = "" if function is split_in_two else \
        f"@test_fit_second_tour.py:{function.__code__.co_firstlineno}"
    assert result.summary["partition"] == f"{__name__}:{function.__qualname__}{where}"


def test_a_partition_function_that_returns_bad_clients_is_still_named():
    inputs, labels = labelled()
    with pytest.raises(UserError, match=r"partition function .*bad_split"
                                         r"@test_fit_second_tour.py:\d+ returned 1 parts"):
        def bad_split(targets, clients, seed):
            return [list(range(len(targets)))]

        mptrain.fit(nn.Linear(8, 2), TensorDataset(inputs, labels), strategy="fedavg",
                    workers=1, clients=2, clients_per_round=2, rounds=1, partition=bad_split)


def test_fit_is_silent_by_default_and_prints_as_the_command_when_asked(capsys):
    # "fit() prints nothing by default": a choice, now said where fit() is documented.
    from pathlib import Path

    inputs, labels = labelled()
    data = TensorDataset(inputs, labels)
    mptrain.fit(nn.Linear(8, 2), data, epochs=1)
    assert capsys.readouterr() == ("", "")
    mptrain.fit(nn.Linear(8, 2), data, epochs=1, quiet=False)
    assert "epoch 1/1" in capsys.readouterr().out
    usage = (Path(__file__).resolve().parents[1] / "docs" / "usage.md").read_text()
    assert "`fit()` prints nothing by default (`quiet=True`)" in usage
    assert "`quiet=False` prints as the command does" in usage
