"""Without Hugging Face's ``datasets`` (an optional extra), ``--data hf:NAME`` says how to get
it, in one line."""

import importlib.util

import pytest

from user_errors import fail

pytestmark = pytest.mark.skipif(importlib.util.find_spec("datasets") is not None,
                                reason="datasets is installed")


def test_hf_data_without_the_extra_is_one_line(capsys):
    assert "pip install 'mptrain[hf]'" in fail(["run", "--data", "hf:flwrlabs/femnist"], capsys)
