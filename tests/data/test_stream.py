"""The stream loader (issue 56, ``--loader stream``): each worker reads its shard of the
user's data set where it lies, through loader threads; the same samples in the same order as
the stacked path, a memory-mapped file never copied, failures named by rank and sample."""

from __future__ import annotations

import multiprocessing
import threading

import numpy as np
import pytest
import torch
import torch.nn as nn

import mptrain
from mptrain.api import bundle_from_datasets
from mptrain.data.stream import StreamDataset
from mptrain.data.stream_feed import LoaderHung
from mptrain.errors import UserError, WorkerFailedError
from sequence_sets import BagOfTokens, Sequences
from stream_sets import (CLASSES, FEATURES, RELEASE, HangsAt, MappedRows, RaisesAt,
                         write_rows)
from user_errors import fail


def small_net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(FEATURES, 8), nn.ReLU(), nn.Linear(8, CLASSES))


@pytest.fixture
def rows(tmp_path):
    path = tmp_path / "rows.bin"
    write_rows(path, 60)
    return MappedRows(path, 60)


def parameters(model):
    return [p.detach().clone() for p in model.parameters()]


def same(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b))


def no_loader_threads() -> bool:
    return not any(t.name.startswith("mptrain-loader") and t.is_alive()
                   for t in threading.enumerate())


@pytest.mark.parametrize("strategy, options", [
    ("single", {"epochs": 2}),
    ("fedavg", {"rounds": 2, "clients": 4, "clients_per_round": 3, "workers": 1}),
])
def test_stream_trains_the_same_samples_in_the_same_order_as_stacked(rows, strategy, options):
    def run(loader):
        model = small_net()
        mptrain.fit(model, rows, strategy=strategy, batch_size=8, loader=loader,
                    threads_per_worker=1, **options)
        return parameters(model)

    assert same(run("stacked"), run("stream"))
    assert no_loader_threads()


def test_a_resumed_stream_run_continues_the_epoch_order(rows, tmp_path):
    straight = small_net()
    mptrain.fit(straight, rows, strategy="single", epochs=2, batch_size=8, loader="stream")
    first = small_net()
    mptrain.fit(first, rows, strategy="single", epochs=1, batch_size=8, loader="stream",
                out=tmp_path / "run", checkpoint_every=1)
    resumed = mptrain.fit(small_net(), rows, strategy="single", epochs=2, batch_size=8,
                          loader="stream", resume=tmp_path / "run", out=tmp_path / "run")
    assert same(parameters(straight), parameters(resumed.model))


def test_collate_pad_works_with_the_stream_loader():
    def run(loader):
        model = BagOfTokens()
        mptrain.fit(model, Sequences(), strategy="single", epochs=1, batch_size=8,
                    collate="pad", loader=loader, threads_per_worker=1)
        return parameters(model)

    assert same(run("stacked"), run("stream"))


def test_augment_runs_on_streamed_batches_as_on_stacked_ones():
    from mptrain.data.sources import digits

    def run(loader):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(),
                              nn.Linear(4 * 36, 10))
        # One torch thread both ways (the loader threads come out of stream's budget): a
        # conv's sums in another order would differ in the last bits.
        mptrain.fit(model, digits(), strategy="single", epochs=1, steps_per_epoch=3,
                    batch_size=16, augment="shift:1,hflip", loader=loader,
                    threads_per_worker=1)
        return parameters(model)

    assert same(run("stacked"), run("stream"))


def test_the_memory_mapped_rows_stay_in_their_file(rows):
    bundle = bundle_from_datasets(rows, None, loader="stream").share_memory_()
    assert isinstance(bundle.train, StreamDataset)
    assert isinstance(rows.rows, np.memmap) and not rows.rows.flags.owndata
    # What goes to /dev/shm is one target per sample, not the rows (60 x 4 float32).
    assert bundle.nbytes == 60 * 8


def test_auto_streams_when_stacking_would_not_fit_in_shared_memory(rows, monkeypatch):
    assert not isinstance(bundle_from_datasets(rows, None, loader="auto").train,
                          StreamDataset)
    monkeypatch.setenv("MPTRAIN_SHM_FREE_MIB", "0.0001")   # ~100 bytes: the rows need 1 kB
    bundle = bundle_from_datasets(rows, None, loader="auto")
    assert isinstance(bundle.train, StreamDataset)
    assert "MiB free" in bundle.loader_reason
    from mptrain.report.summary import stream_line

    config = mptrain.TrainConfig(loader="auto")
    assert "instead of stacked" in stream_line(bundle, config)


def test_a_hanging_loader_is_named_within_the_worker_timeout(tmp_path):
    path = tmp_path / "rows.bin"
    write_rows(path, 20)
    RELEASE.clear()
    try:
        with pytest.raises(LoaderHung, match=r"rank 0: the loader made no progress for 1 s, "
                                             r"reading sample 5 of the training data"):
            mptrain.fit(small_net(), HangsAt(path, 20), strategy="single", epochs=1,
                        batch_size=4, loader="stream", worker_timeout=1)
    finally:
        RELEASE.set()   # the stuck thread returns, and is told to stop
    for thread in threading.enumerate():
        if thread.name.startswith("mptrain-loader"):
            thread.join(timeout=60)
    assert no_loader_threads()


@pytest.mark.timeout(180)
def test_a_raising_sample_in_a_worker_names_rank_and_index_and_leaves_nothing(tmp_path):
    path = tmp_path / "rows.bin"
    write_rows(path, 40)
    with pytest.raises(WorkerFailedError) as caught:
        mptrain.fit(small_net(), RaisesAt(path, 40), strategy="ddp", workers=2, epochs=1,
                    batch_size=4, loader="stream")
    message = str(caught.value)
    assert "LoaderFailed: rank" in message
    assert "reading sample 13 of the training data raised ValueError: sample 13 is " \
           "corrupt" in message
    assert "RaisesAt" in message or "__getitem__" in message   # the user's frame
    assert multiprocessing.active_children() == []   # every worker reaped


@pytest.mark.timeout(240)
def test_spawned_ddp_workers_read_the_mapped_file_in_place(tmp_path):
    """Spawn is the hard case (fork inherits the mapping): the set reaches each worker as a
    plain pickle, which maps the file again, and every read checks the mapping is there."""
    path = tmp_path / "rows.bin"
    write_rows(path, 40)
    model = small_net()
    result = mptrain.fit(model, MappedRows(path, 40, in_place=True), strategy="ddp",
                         workers=2, epochs=1, batch_size=4, loader="stream",
                         start_method="spawn")
    assert result.summary["loader"] == "stream"


def test_bad_loader_settings_are_one_line_errors(capsys):
    assert "--loader-workers must be a non-negative integer, got -1" in fail(
        ["run", "--loader-workers", "-1", "--epochs", "1"], capsys)
    assert "--loader stream reads a map-style Dataset; training data is a Endless" in fail(
        ["run", "--data", "stream_sets:make_endless", "--loader", "stream"], capsys)
    with pytest.raises(UserError, match="loader_workers must be a non-negative integer"):
        mptrain.fit(small_net(), Sequences(), loader="stream", loader_workers=-2)
    # Loader threads with the loader that has none: they were ignored without a word.
    assert "--loader-workers sets the stream loader's threads, and --loader stacked has " \
        "none" in fail(["run", "--loader", "stacked", "--loader-workers", "4", "--epochs",
                        "1"], capsys)
    mptrain.TrainConfig(loader="stacked", loader_workers=mptrain.TrainConfig().loader_workers)


def feed_of(dataset, loader_workers=2):
    from mptrain.data.stream import StreamDataset

    data = StreamDataset(dataset, "training data")
    data.loader_workers = loader_workers
    return data, data.feed_on(torch.device("cpu"), rank=3)


def test_ctrl_c_in_the_training_loop_stops_the_loader_threads(rows):
    _, feed = feed_of(rows)
    batches = feed.batches(enumerate(torch.arange(60).split(4)))
    next(batches)
    assert not no_loader_threads()   # reading ahead
    with pytest.raises(KeyboardInterrupt):
        batches.throw(KeyboardInterrupt)
    assert no_loader_threads()


def refuse_to_collate(sequences, targets):
    raise RuntimeError("no padding today")


def test_a_collate_that_raises_is_named_with_rank_and_batch():
    from mptrain.data.ragged import given_collate
    from mptrain.data.stream_feed import LoaderFailed

    data, feed = feed_of(Sequences())
    data.collate = given_collate(refuse_to_collate)
    with pytest.raises(LoaderFailed, match=r"rank 3: collating the batch of samples 8\.\.\. "
                                           r"of the training data raised RuntimeError: no "
                                           r"padding today"):
        list(feed.batches([(0, torch.tensor([8, 9]))]))
    assert no_loader_threads()


def test_a_targets_attribute_that_disagrees_with_the_samples_is_not_trusted():
    from stream_sets import Rescaled

    stacked = bundle_from_datasets(Rescaled(), None, loader="stacked").train.targets
    streamed = bundle_from_datasets(Rescaled(), None, loader="stream").train.targets
    assert streamed.dtype == stacked.dtype and torch.equal(streamed, stacked)


def test_targets_of_two_shapes_are_one_line_with_the_stream_loader():
    from stream_sets import TargetsOfTwoShapes

    with pytest.raises(UserError, match="training data: targets cannot be stacked into one "
                                        "tensor .*all targets must have the same shape"):
        bundle_from_datasets(TargetsOfTwoShapes(), None, loader="stream")


def test_targets_are_read_a_chunk_at_a_time_never_every_sample_held(monkeypatch):
    from mptrain.data import stream
    from stream_sets import RowsWithTheirLabel

    monkeypatch.setattr(stream, "TARGETS_PER_READ", 8, raising=False)
    rows = RowsWithTheirLabel(64)
    targets = StreamDataset(rows, "training data").targets
    assert targets.tolist() == [float(i % CLASSES) for i in range(64)]
    assert rows.most_alive <= 8 + 2   # a chunk's rows, and the first and last samples


@pytest.mark.parametrize("loader", ["auto", "stream", "stacked"])
def test_an_empty_set_says_so_whichever_loader(loader):
    from stream_sets import Empty

    with pytest.raises(UserError, match="^training data is empty$"):
        bundle_from_datasets(Empty(), None, loader=loader)
    with pytest.raises(UserError, match="^test data is empty$"):
        bundle_from_datasets(Sequences(), Empty(), loader=loader)


def test_an_evaluation_waiting_for_its_loader_keeps_the_heartbeat(tmp_path):
    """The test set's feed beats as the training feed does: the watchdog, whose bound is
    the loader's patience, would otherwise stop a slow evaluation with no word of the
    sample. The beat here lets the stuck read go, so the batch comes."""
    from types import SimpleNamespace

    from mptrain.engine.evaluation import TestSetEvaluation

    path = tmp_path / "rows.bin"
    write_rows(path, 20)
    test = StreamDataset(HangsAt(path, 20), "test data")
    test.patience_s = 10.0   # before the fix: LoaderHung then
    RELEASE.clear()
    setup = SimpleNamespace(device=torch.device("cpu"), data=SimpleNamespace(test=test),
                            group=SimpleNamespace(world_size=1, rank=0),
                            progress=SimpleNamespace(beat=RELEASE.set))
    try:
        feed = TestSetEvaluation(setup).feed
        (_, _, inputs, _), = feed.batches([(0, torch.tensor([HangsAt.bad]))])
    finally:
        RELEASE.set()
    assert inputs.shape == (1, FEATURES)


def test_a_memory_mapped_array_is_not_pickled_whole_for_spawned_workers(tmp_path):
    import pickle

    from stream_sets import RowsPickledWhole, TensorMappedWhole

    path = tmp_path / "rows.bin"
    write_rows(path, 20)
    for mapped, kind in ((RowsPickledWhole, r"an np\.memmap"),
                         (TensorMappedWhole, r"a tensor mapped from .*rows\.bin")):
        data = StreamDataset(mapped(path, 20), "training data")
        with pytest.raises(UserError, match=rf"^the training data holds {kind} .*"
                                            r"__setstate__.*start.method fork"):
            pickle.dumps(data)
    assert pickle.loads(pickle.dumps(StreamDataset(MappedRows(path, 20), "training data")))


def test_a_data_set_class_spawned_workers_cannot_import_is_refused_in_one_line(monkeypatch):
    # Pickled by reference, a notebook's class (or one defined inside a function) reached
    # every spawned worker as a name it could not import: each died with "AttributeError:
    # Can't get attribute 'D' on <module '__main__'>" and the run said only "exited with
    # code 1 before finishing". The model's class is refused in one line; so is the data's.
    import pickle
    import sys

    class Local(torch.utils.data.Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, index):
            return torch.zeros(FEATURES), 0

    with pytest.raises(UserError, match=r"^the training data is a Local, defined inside a "
                                        r"function, which spawn'd workers cannot import"):
        pickle.dumps(StreamDataset(Local(), "training data"))
    # As a notebook cell defines it: at the top level of a __main__ that has no file.
    cell = type("Cell", (Local,), {"__module__": "__main__"})
    monkeypatch.delattr(sys.modules["__main__"], "__file__", raising=False)
    with pytest.raises(UserError, match=r"^the training data is a Cell, defined in a "
                                        r"notebook or at the Python prompt, which spawn'd "
                                        r"workers cannot import; define it in a \.py module"):
        pickle.dumps(StreamDataset(cell(), "training data"))


def test_a_resume_under_the_other_loader_says_which_loader_to_give(rows, tmp_path):
    """``auto`` may choose otherwise on a resume (/dev/shm's free space changed): the data is
    the same, only read otherwise, and the fingerprints cannot be compared."""
    mptrain.fit(small_net(), rows, strategy="single", epochs=1, batch_size=8,
                loader="stacked", out=tmp_path / "run", checkpoint_every=1)
    with pytest.raises(UserError, match=r"^the checkpoint's run held the training data "
                                        r"stacked, this one streams it: resume with "
                                        r"loader stacked$"):
        mptrain.fit(small_net(), rows, strategy="single", epochs=2, batch_size=8,
                    loader="stream", resume=tmp_path / "run", out=tmp_path / "run")


def test_auto_sizes_the_stacked_data_by_its_larger_end_not_its_first_sample(monkeypatch):
    from stream_sets import Lengthening

    monkeypatch.setenv("MPTRAIN_SHM_FREE_MIB", "0.1")   # 10 first samples fit, 10 last don't
    assert isinstance(bundle_from_datasets(Lengthening(), None, loader="auto").train,
                      StreamDataset)


def test_stacked_data_too_large_for_shared_memory_is_told_of_the_stream_loader(
        rows, monkeypatch):
    monkeypatch.setenv("MPTRAIN_SHM_FREE_MIB", "0.0001")
    with pytest.raises(UserError, match=r"MiB free; .*or loader stream \(the data read "
                                        r"where it lies\)"):
        mptrain.fit(small_net(), rows, strategy="hogwild", workers=2, batch_size=8,
                    loader="stacked")


COLLATED_SIZES: list = []


def recording_pad(sequences, targets):
    COLLATED_SIZES.append(len(sequences))
    return torch.nn.utils.rnn.pad_sequence(sequences, batch_first=True), targets


def test_a_fedavg_clients_rows_are_held_without_collating_them_all_at_once():
    """A client's block keeps its sequences as they are; the collate runs per batch of its
    local epochs (it ran once on all the client's rows, only for their targets)."""
    from mptrain.data.ragged import given_collate

    data, feed = feed_of(Sequences())
    data.collate = given_collate(recording_pad)
    COLLATED_SIZES.clear()
    block_feed, positions = feed.for_rows([torch.arange(10), torch.arange(20, 26)])
    assert COLLATED_SIZES == [] and [len(p) for p in positions] == [10, 6]
    assert block_feed.data.targets.tolist() == [Sequences()[i][1] for i in
                                                [*range(10), *range(20, 26)]]


def test_a_sample_that_is_no_pair_is_named_by_the_loader_as_stacking_names_it():
    from mptrain.data.stream_feed import LoaderFailed
    from stream_sets import DictAt

    _, feed = feed_of(DictAt())
    with pytest.raises(LoaderFailed, match=r"rank 3: reading sample 5 of the training data "
                                           r"raised UserError: training data\[5\] is a dict; "
                                           r"each sample must be an \(input, target\) pair"):
        list(feed.batches([(0, torch.arange(4, 8))]))


def test_an_iterable_test_set_under_auto_is_refused_as_stacking_refuses_it(rows):
    from stream_sets import Endless

    with pytest.raises(UserError, match=r"^test data is a Endless, not a map-style Dataset"):
        bundle_from_datasets(rows, Endless(), loader="auto")


class OneReadingPosition(torch.utils.data.Dataset):
    """A set with one reading position, as one file handle seeked then read: a read of
    sample 0 waits (bounded) to see whether another read starts while it is inside."""

    def __init__(self):
        self.lock, self.inside, self.most = threading.Lock(), 0, 0
        self.second_read = threading.Event()

    def __len__(self):
        return 16

    def __getitem__(self, index):
        with self.lock:
            self.inside += 1
            self.most = max(self.most, self.inside)
            if self.inside > 1:
                self.second_read.set()
        if index == 0:
            self.second_read.wait(timeout=1.0)   # bounded: one reader waits it out
        with self.lock:
            self.inside -= 1
        return torch.zeros(FEATURES), torch.tensor(index % CLASSES)


def test_by_default_a_data_set_is_read_one_sample_at_a_time():
    """A set written for DataLoader's worker processes need not be thread-safe: the default
    loader reads it from one thread, ahead of the step."""
    from mptrain.config import TrainConfig

    dataset = OneReadingPosition()
    _, feed = feed_of(dataset, loader_workers=TrainConfig().loader_workers)
    batches = list(feed.batches(enumerate(torch.arange(16).split(4))))
    assert len(batches) == 4
    assert dataset.most == 1
