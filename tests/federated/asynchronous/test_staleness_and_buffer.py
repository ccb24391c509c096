"""Staleness weights as FedAsync and FedBuff define them, their spelling, and a buffer's
coefficients and change."""

import math

import pytest
import torch

from mptrain.errors import UserError
from mptrain.federated.asynchronous.buffer import buffer_coefficients, buffered_change
from mptrain.federated.asynchronous.staleness import parse_staleness_weight


@pytest.mark.parametrize("text, staleness, expected", [
    (None, 3, 0.5),                          # FedBuff's 1/sqrt(1+s)
    ("polynomial:0.5", 0, 1.0),
    ("polynomial:2", 1, 0.25),
    ("constant", 9, 1.0),
    ("hinge:0.5,2", 2, 1.0),                 # 1 up to s = B
    ("hinge:0.5,2", 6, 1 / (0.5 * 4 + 1)),
])
def test_each_weight_is_the_papers_function(text, staleness, expected):
    assert math.isclose(parse_staleness_weight(text)(staleness), expected)


def test_the_banner_names_the_default_as_fedbuff_writes_it():
    assert parse_staleness_weight(None).describe() == "1/sqrt(1+s)"
    assert parse_staleness_weight("polynomial:1").describe() == "(1+s)^-1"


@pytest.mark.parametrize("text", ["constant", "polynomial:0.5", "hinge:10,4"])
def test_the_summary_spells_a_weight_as_the_flag_does(text):
    assert parse_staleness_weight(text).spec == text


@pytest.mark.parametrize("text", ["sqrt", "polynomial", "polynomial:-1", "hinge:1",
                                  "hinge:0,1", "constant:2", "polynomial:x", "polynomial:nan",
                                  3])
def test_a_bad_spelling_is_one_line(text):
    with pytest.raises(UserError, match="staleness") as err:
        parse_staleness_weight(text)
    assert "\n" not in str(err.value)


def test_coefficients_weigh_data_and_staleness_over_the_buffers_data():
    weight = parse_staleness_weight(None)
    assert buffer_coefficients([10, 30, 0], [0, 3, 1], weight) == [0.25, 0.75 * 0.5, 0.0]
    assert buffer_coefficients([0, 0], [0, 0], weight) == [0.0, 0.0]


def test_the_change_is_the_sum_in_buffer_order_or_nothing():
    rows = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert torch.equal(buffered_change(rows, [0.5, 0.25]), torch.tensor([1.25, 2.0]))
    assert buffered_change(rows, [0.0, 0.0]) is None
