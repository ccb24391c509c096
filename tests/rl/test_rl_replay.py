import multiprocessing

import pytest
import torch

from mptrain.rl.replay import SharedReplay


def fill(buffer, actor, count, start=0):
    for i in range(start, start + count):
        buffer.add(actor, [float(i), actor, 0.0], i % 2, float(i), [i + 1.0, actor, 0.0],
                   i % 7 == 0)


def test_tensors_are_in_shared_memory():
    buffer = SharedReplay.create(64, obs_dim=3, actors=2, margin=4)
    assert all(t.is_shared() for t in buffer.tensors())
    assert buffer.segment_size == 32


@pytest.mark.parametrize("capacity, obs_dim, actors", [(64, 3, 2), (1001, 4, 3), (5000, 8, 7)])
def test_size_estimate_is_what_create_allocates(capacity, obs_dim, actors):
    buffer = SharedReplay.create(capacity, obs_dim, actors, margin=4)
    allocated = sum(t.numel() * t.element_size() for t in buffer.tensors())
    assert SharedReplay.estimate_nbytes(capacity, obs_dim, actors) == allocated


def test_add_keeps_each_actor_in_its_segment_and_wraps_around():
    buffer = SharedReplay.create(40, obs_dim=3, actors=2, margin=2)
    fill(buffer, 1, 25)   # 20 rows per segment: the last 5 wrapped onto the oldest
    assert buffer.counts.tolist() == [0, 25]
    assert buffer.total() == 25
    assert buffer.obs[:20].abs().sum() == 0          # actor 0's segment untouched
    segment = buffer.obs[20:40, 0].tolist()
    assert segment[:5] == [20.0, 21.0, 22.0, 23.0, 24.0]   # overwritten by the wrap
    assert segment[5:] == [float(i) for i in range(5, 20)]
    assert buffer.rewards[20].item() == 20.0 and buffer.dones[20 + 21 % 20].item() == 1.0


def test_sampling_reads_only_rows_clear_of_both_ends():
    buffer = SharedReplay.create(40, obs_dim=3, actors=2, margin=2)
    assert buffer.sample(8, torch.Generator().manual_seed(0)) is None
    fill(buffer, 0, 10)
    fill(buffer, 1, 25)
    assert buffer.sampleable() == [(0, 8), (7, 23)]
    batch = buffer.sample(5000, torch.Generator().manual_seed(0))
    actor = batch.obs[:, 1]
    written = batch.obs[:, 0]
    assert set(written[actor == 0].tolist()) == {float(i) for i in range(8)}
    assert set(written[actor == 1].tolist()) == {float(i) for i in range(7, 23)}
    # uniform over readable rows: 8 of actor 0's against 16 of actor 1's
    assert (actor == 0).float().mean().item() == pytest.approx(8 / 24, abs=0.03)
    # every field of a row comes from the same transition
    assert torch.equal(batch.next_obs[:, 0], written + 1)
    assert torch.equal(batch.rewards, written)
    assert torch.equal(batch.actions, written.long() % 2)


def test_state_round_trip():
    buffer = SharedReplay.create(40, obs_dim=3, actors=2, margin=2)
    fill(buffer, 0, 13)
    saved = buffer.state()
    other = SharedReplay.create(40, obs_dim=3, actors=2, margin=2)
    other.load_state(saved)
    assert all(torch.equal(a, b) for a, b in zip(buffer.tensors(), other.tensors()))


def _child_fills(buffer, actor):
    fill(buffer, actor, 30)


def test_another_process_writes_are_seen_by_the_learner():
    buffer = SharedReplay.create(64, obs_dim=3, actors=2, margin=2)
    context = multiprocessing.get_context("fork")
    child = context.Process(target=_child_fills, args=(buffer, 1))
    child.start()
    child.join(timeout=30)
    if child.is_alive():
        child.kill()
        child.join()
    assert child.exitcode == 0
    assert buffer.counts.tolist() == [0, 30]
    assert buffer.obs[32 + 29, 0].item() == 29.0
