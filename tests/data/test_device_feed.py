"""Batches on the worker's device: the same samples in the same order as on CPU, a GPU copy
started one batch ahead of the step that needs it, and the data set resident on the GPU
when it fits. The CUDA forms run where a GPU is visible (and in ``benchmarks/gpu.py``)."""

import pytest
import torch

from mptrain.data import device_feed
from mptrain.data.device_feed import DeviceFeed, Lookahead, feed_for
from mptrain.data.shared import PixelDecode, SharedTensorDataset

CPU = torch.device("cpu")


def data():
    return SharedTensorDataset(torch.arange(40.0).view(20, 2), torch.arange(20) % 3)


def pairs():
    return [(step, torch.tensor([step, 19 - step])) for step in range(4)]


def test_on_cpu_a_batch_is_the_data_sets_own():
    feed, given = feed_for(data(), CPU), pairs()
    assert type(feed) is DeviceFeed
    for (key, indices), (got_key, got_indices, inputs, targets) in zip(given,
                                                                     feed.batches(given)):
        assert got_key == key and got_indices is indices
        assert torch.equal(inputs, data().inputs[indices])
        assert torch.equal(targets, data().targets[indices])


def test_the_next_batch_is_started_before_this_one_is_handed_out():
    log = []

    def start(pair):
        log.append(("start", pair[0]))
        return pair

    def finish(pair):
        log.append(("finish", pair[0]))
        return pair

    for key, _ in Lookahead(start, finish).run(pairs()):
        log.append(("step", key))
    assert log == [("start", 0), ("start", 1), ("finish", 0), ("step", 0),
                   ("start", 2), ("finish", 1), ("step", 1),
                   ("start", 3), ("finish", 2), ("step", 2),
                   ("finish", 3), ("step", 3)]
    assert list(Lookahead(start, finish).run([])) == []


def test_a_loop_that_stops_early_started_at_most_one_batch_more():
    started = []
    batches = Lookahead(lambda pair: started.append(pair[0]) or pair, lambda pair: pair)
    for key, _ in batches.run(pairs()):
        if key == 1:
            break
    assert started == [0, 1, 2]


@pytest.mark.parametrize("sharers, kind", [(1, "resident"), (2, "resident"),
                                           (3, "prefetched")])
def test_resident_where_a_fifth_of_the_free_memory_holds_every_ranks_copy(monkeypatch,
                                                                          sharers, kind):
    made = []
    monkeypatch.setattr(device_feed, "ResidentFeed", lambda d, dev: made.append("resident"))
    monkeypatch.setattr(device_feed, "PrefetchFeed", lambda d, dev: made.append("prefetched"))
    dataset = data()
    free = dataset.nbytes * 2 * 5    # a fifth of it holds two copies, not three
    feed_for(dataset, torch.device("cuda", 0), sharers, free_bytes=lambda device: free)
    assert made == [kind]


@pytest.mark.skipif(torch.cuda.device_count() == 0, reason="needs a CUDA device")
@pytest.mark.parametrize("kind", ["ResidentFeed", "PrefetchFeed"])
def test_on_a_gpu_the_batches_are_the_same_samples(kind):
    device = torch.device("cuda", 0)
    feed = getattr(device_feed, kind)(data(), device)
    for key, indices, inputs, targets in feed.batches(pairs()):
        assert inputs.device == targets.device == device
        assert torch.equal(inputs.cpu(), data().inputs[indices])
        assert torch.equal(targets.cpu(), data().targets[indices])
    inputs, targets = feed.batch(torch.tensor([3, 4]))
    assert torch.equal(inputs.cpu(), data().inputs[3:5])


def pixels():
    """uint8 pixels decoded per batch (``--data-dtype uint8``)."""
    return SharedTensorDataset(torch.arange(40, dtype=torch.uint8).view(20, 2),
                               torch.arange(20) % 3, decode=PixelDecode(0.5, 1.0))


@pytest.mark.parametrize("kind", ["ResidentFeed", "PrefetchFeed"])
def test_pixels_cross_to_the_device_as_uint8_and_decode_there(kind):
    # A quarter of the bytes on the bus (or resident); the batch the model sees is the
    # float32 one a CPU worker gathers.
    device = torch.device("cuda", 0) if kind == "PrefetchFeed" else CPU
    if device.type == "cuda" and not torch.cuda.is_available():
        pytest.skip("no GPU")
    feed = getattr(device_feed, kind)(pixels(), device)
    for key, indices, inputs, targets in feed.batches(pairs()):
        assert inputs.dtype == torch.float32
        assert torch.equal(inputs.cpu(), pixels().batch(indices)[0])
    if kind == "ResidentFeed":
        assert feed.inputs.dtype == torch.uint8
