"""What the third new-user tour found: settings a run could never act on, accepted and then
left unused until the end -- a test accuracy to stop at where no test accuracy is measured,
per-client accuracy on data that has no classes."""

import pytest
import torch
import torch.nn as nn
from torch.utils.data import TensorDataset

import mptrain
from mptrain.cli import main
from mptrain.errors import UserError

pytestmark = pytest.mark.timeout(120)


def labelled(samples=64):
    inputs = torch.randn(samples, 8, generator=torch.Generator().manual_seed(0))
    return TensorDataset(inputs, (inputs[:, 0] > 0).long())


def regression(samples=64):
    inputs = torch.randn(samples, 8, generator=torch.Generator().manual_seed(0))
    return TensorDataset(inputs, inputs[:, :1] * 0.5)


@pytest.mark.parametrize("strategy", ["single", "fedavg"])
def test_a_target_accuracy_without_a_test_set_is_refused(strategy):
    # It trained every epoch and ended "target accuracy 50.00% not reached": nothing was
    # ever scored against it.
    units = {"epochs": 2} if strategy == "single" else {"rounds": 2, "workers": 1}
    with pytest.raises(UserError, match=r"^target_accuracy stops the run at a test accuracy, "
                                        r"but there is no test set to score"):
        mptrain.fit(nn.Linear(8, 2), labelled(), None, strategy=strategy,
                    target_accuracy=0.5, threads_per_worker=1, **units)


def test_a_target_accuracy_on_regression_data_is_refused():
    with pytest.raises(UserError, match=r"^target_accuracy stops the run at a test accuracy, "
                                        r"but a regression run \(float targets\) has none"):
        mptrain.fit(nn.Linear(8, 1), regression(), regression(16), epochs=2,
                    target_accuracy=0.5)


def test_the_command_line_refuses_a_target_accuracy_on_regression_in_one_line(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--data", "linreg", "--target-accuracy", "0.5", "--epochs", "1"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mptrain: error: --target-accuracy stops the run at a test "
                          "accuracy") and "\n" not in err


@pytest.mark.parametrize("strategy, clients", [("fedavg", {"clients_per_round": 2}),
                                               ("fedbuff", {"concurrency": 2})])
def test_client_evaluation_on_regression_data_is_refused(strategy, clients):
    # The banner said "every client evaluated every round ... rows in client_metrics.jsonl"
    # and no row was ever written: client accuracy needs classes.
    with pytest.raises(UserError, match=r"^client_eval_every scores each client's accuracy "
                                        r"on its own data, which needs a classifier"):
        mptrain.fit(nn.Linear(8, 1), regression(), regression(16), strategy=strategy,
                    workers=1, rounds=1, clients=4, client_eval_every=1,
                    threads_per_worker=1, **clients)


@pytest.mark.parametrize("name, value", [("start_method", "spawn"),
                                         ("sharing_strategy", "file_system")])
def test_process_settings_of_a_run_that_starts_no_process_are_refused(name, value):
    # single trains in the calling process: they were taken and did nothing.
    with pytest.raises(UserError, match=rf"^{name} does nothing with strategy single, which "
                                        r"trains in this process \(no worker is started\); "
                                        rf"leave {name} out"):
        mptrain.fit(nn.Linear(8, 2), labelled(), epochs=1, **{name: value})
    mptrain.fit(nn.Linear(8, 2), labelled(), epochs=1, sharing_strategy="auto")   # default


def test_a_classifier_without_a_test_set_still_trains_to_the_end():
    result = mptrain.fit(nn.Linear(8, 2), labelled(), None, epochs=1)
    assert len(result.epochs) == 1 and result.test_accuracy is None


def test_a_test_set_beside_a_loaded_bundle_is_refused():
    # The bundle of load_data brings its own test set; the one given beside it was ignored
    # without a word, and the run scored on the bundle's.
    bundle = mptrain.load_data("linreg")
    with pytest.raises(UserError, match=r"^fit\(\) got a DataBundle, which carries its own "
                                        r"test set \(linreg's\), and a test_data beside it"):
        mptrain.fit(nn.Linear(1, 1), bundle, regression(), epochs=1)
    # The bundle's own test set beside it says the same thing twice: it trains.
    assert len(mptrain.fit(nn.Linear(1, 1), bundle, bundle.test, epochs=1).epochs) == 1


def test_a_transform_spawned_workers_cannot_import_is_refused_before_they_start():
    # A lambda (or a notebook's function) is found by name in a spawned worker, which cannot
    # import it: every worker failed with a traceback, where the model's class, in the same
    # case, is refused in one line before any process starts.
    with pytest.raises(UserError, match=r"^transform .*<lambda>.* is a lambda, which "
                                        r"spawn'd workers cannot import.*define it at the "
                                        r"top level of a \.py module"):
        mptrain.fit(nn.Linear(8, 2), labelled(), strategy="sync", workers=2, epochs=1,
                    batch_size=16, start_method="spawn", transform=lambda x, y, g: (x, y))


def test_a_notebooks_collate_is_refused_under_spawn(monkeypatch):
    import sys

    from sequence_sets import BagOfTokens, Sequences

    def collate(sequences, targets):
        tokens = nn.utils.rnn.pad_sequence(sequences, batch_first=True)
        return (tokens, tokens > 0), targets

    collate.__module__, collate.__qualname__ = "__main__", "collate"   # a notebook's
    monkeypatch.delattr(sys.modules["__main__"], "__file__", raising=False)
    with pytest.raises(UserError, match=r"^collate '__main__:collate' is defined in a "
                                        r"notebook or at the Python prompt"):
        mptrain.fit(BagOfTokens(), Sequences(), strategy="sync", workers=2, epochs=1,
                    batch_size=8, start_method="spawn", collate=collate)


def test_a_lambda_transform_still_trains_forked_workers():
    result = mptrain.fit(nn.Linear(8, 2), labelled(), strategy="sync", workers=2, epochs=1,
                         batch_size=16, start_method="fork", threads_per_worker=1,
                         transform=lambda x, y, g: (x, y))
    assert len(result.epochs) == 1


def test_what_a_spawned_worker_would_import_by_the_name_must_be_what_was_given(
        tmp_path, monkeypatch):
    # A functools.partial goes by "functools:partial", a callable object by its class's
    # name: each spawned worker imported that, and failed with a traceback ("the first
    # argument must be callable", "__init__() takes 2 positional arguments").
    import functools
    from types import SimpleNamespace

    from mptrain.data.batch_transform import given_transform
    from mptrain.launch.preflight import check_functions_importable

    (tmp_path / "augmod.py").write_text(
        "def scale(x, y, generator, factor=1.0):\n    return x * factor, y\n\n\n"
        "class Scale:\n    def __init__(self, factor):\n        self.factor = factor\n\n"
        "    def __call__(self, x, y, generator):\n        return x * self.factor, y\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import augmod

    def given(function):
        return SimpleNamespace(transform=given_transform(function), collate=None)

    check_functions_importable(given(augmod.scale))   # a module's function: found by name
    for function in (functools.partial(augmod.scale, factor=2.0), augmod.Scale(2.0)):
        with pytest.raises(UserError, match=r"transform '[^']+' names something else than "
                                            r"the transform given .*spawn'd workers import "
                                            r"it by that name; give a function defined at "
                                            r"the top level of a \.py module$"):
            check_functions_importable(given(function))
