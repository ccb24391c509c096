"""fit()'s own arguments (not settings) of the wrong kind: one-line UserErrors naming the
argument, where they were a TypeError traceback or silently did nothing."""

import pytest
import torch
import torch.nn as nn
from torch.utils.data import TensorDataset

import mptrain
from mptrain.callbacks import Callback
from mptrain.errors import UserError


def data():
    inputs = torch.randn(32, 4, generator=torch.Generator().manual_seed(0))
    return TensorDataset(inputs, (inputs[:, 0] > 0).long())


class Counting(Callback):
    def __init__(self):
        self.rounds = 0

    def on_round_end(self, row):
        self.rounds += 1


@pytest.mark.parametrize("arguments, words", [
    ({"out": 5}, "out takes a folder (a str or pathlib.Path), got int"),
    ({"resume": 5}, "resume takes a folder or checkpoint file (a str or pathlib.Path), "
                    "or a loaded Checkpoint, got int"),
    ({"tb_dir": ["tb"]}, "tb_dir takes a folder (a str or pathlib.Path), got list"),
    ({"callbacks": [Counting]}, "callbacks[0] is the class Counting; pass an instance: "
                                "Counting()"),
    ({"callbacks": "print"}, "callbacks[0] is a str with none of a Callback's methods"),
    ({"callbacks": [lambda row: None]}, "callbacks[0] is a function with none of a "
                                        "Callback's methods"),
])
def test_an_argument_of_the_wrong_kind_is_one_line(tmp_path, arguments, words):
    with pytest.raises(UserError) as caught:
        mptrain.fit(nn.Linear(4, 2), data(), epochs=1, **arguments)
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_a_callback_instance_and_a_path_are_taken(tmp_path):
    counting = Counting()
    mptrain.fit(nn.Linear(4, 2), data(), epochs=2, out=tmp_path / "run", callbacks=counting)
    assert counting.rounds == 2 and (tmp_path / "run" / "summary.json").is_file()
