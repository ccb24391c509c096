"""A misspelt name is answered with the one that was meant (issue 57, second tour): a
strategy, an optimizer or an algorithm as partitions and attacks already were, a dotted name
where an import string was meant, and text labels with what to do about them."""

import pytest
import torch
from torch import nn

import mptrain
from mptrain.errors import UserError, did_you_mean
from user_errors import fail

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("argv, words", [
    (["run", "--strategy", "hogwlid"], "(did you mean hogwild?)"),
    (["run", "--optimizer", "adamm"], "(did you mean adam?)"),
    (["rl", "--algo", "dqm"], "(did you mean dqn?)"),
    (["bench", "--device", "cpuu"], "(did you mean cpu?)"),
    (["run", "--data", "digts"], "unknown data set 'digts' (did you mean digits?)"),
])
def test_a_misspelt_choice_names_the_close_one(capsys, argv, words):
    assert words in fail(argv, capsys)


@pytest.mark.parametrize("argv, flag", [
    (["run", "--data", "mypkg.stuff.make"], "data set"),
    (["run", "--model", "mypkg.stuff.make"], "model"),
    (["run", "--strategy", "fedavg", "--partition", "mypkg.stuff.make"], "--partition"),
    (["rl", "--net", "mypkg.stuff.make"], "--net"),
])
def test_a_dotted_name_for_an_import_string_gets_the_colon(capsys, argv, flag):
    # It was told the name is unknown, or not an import string, and left to find the ':'.
    err = fail(argv, capsys)
    assert flag in err and "(did you mean 'mypkg.stuff:make'?)" in err


def test_a_dotted_env_gets_the_colon(capsys):
    pytest.importorskip("gymnasium")
    err = fail(["rl", "--env", "mypkg.stuff.make"], capsys)
    assert "--env 'mypkg.stuff.make' (did you mean 'mypkg.stuff:make'?)" in err


def test_a_config_files_strategy_and_fits_own_get_the_suggestion_too(tmp_path, capsys):
    (tmp_path / "c.toml").write_text('strategy = "hogwlid"\n')
    assert "(did you mean hogwild?)" in fail(["run", "--config", str(tmp_path / "c.toml")],
                                              capsys)
    with pytest.raises(UserError, match=r"did you mean hogwild\?"):
        mptrain.fit(nn.Linear(4, 2), [(torch.zeros(4), 0)] * 8, strategy="hogwlid")


def test_one_wording_of_the_suggestion():
    assert did_you_mean("hogwlid", ["single", "hogwild"]) == " (did you mean hogwild?)"
    assert did_you_mean("zzz", ["single", "hogwild"]) == ""
    assert did_you_mean(5, ["single"]) == ""


@pytest.mark.parametrize("label", ["cat", b"cat"])
def test_class_names_as_labels_are_told_to_be_integers(label):
    # It said "holds a str; samples must be tensors, numpy arrays or numbers".
    data = [(torch.zeros(4), label)] * 8
    with pytest.raises(UserError, match="map class names to integers"):
        mptrain.fit(nn.Linear(4, 2), data)


def test_a_numpy_array_of_class_names_is_told_the_same():
    import numpy as np

    data = [(torch.zeros(4), np.array("cat"))] * 8
    with pytest.raises(UserError, match="map class names to integers"):
        mptrain.fit(nn.Linear(4, 2), data)
