import multiprocessing

import pytest
import torch

from mptrain.rl.replay import SharedReplay, rows_before, segment_rows


def fill(buffer, actor, count):
    """``count`` more steps of ``actor``; each row records its global step in obs[0]."""
    for _ in range(count):
        step = buffer.next_step(actor)
        buffer.add(actor, [float(step), actor, 0.0], step % 2, float(step),
                   [step + 1.0, actor, 0.0], step % 7 == 0)


def test_tensors_are_in_shared_memory():
    buffer = SharedReplay.create(64, obs_dim=3, actors=2)
    assert all(t.is_shared() for t in buffer.tensors())
    assert buffer.segment_size == segment_rows(64, 2, 0) == 33


@pytest.mark.parametrize("capacity, obs_dim, actors, ahead",
                         [(64, 3, 2, 0), (1001, 4, 3, 96), (5000, 8, 7, 768)])
def test_size_estimate_is_what_create_allocates(capacity, obs_dim, actors, ahead):
    buffer = SharedReplay.create(capacity, obs_dim, actors, ahead)
    allocated = sum(t.numel() * t.element_size() for t in buffer.tensors())
    assert SharedReplay.estimate_nbytes(capacity, obs_dim, actors, ahead) == allocated
    assert buffer.segment_size * actors >= capacity + ahead


@pytest.mark.parametrize("actors", [1, 2, 3])
def test_rows_before_counts_each_actors_share_of_the_global_steps(actors):
    for step in range(20):
        owners = [g % actors for g in range(step)]
        assert [rows_before(step, a, actors) for a in range(actors)] == \
            [owners.count(a) for a in range(actors)]


def test_each_actor_writes_its_own_global_steps_into_its_segment_and_wraps():
    buffer = SharedReplay.create(40, obs_dim=3, actors=2)   # 21 rows per segment
    fill(buffer, 1, 25)
    assert buffer.counts.tolist() == [0, 25] and buffer.total() == 25
    assert buffer.next_step(1) == 51 and buffer.next_step(0) == 0
    assert buffer.obs[:21].abs().sum() == 0          # actor 0's segment untouched
    segment = buffer.obs[21:42, 0].tolist()
    assert segment[:4] == [43.0, 45.0, 47.0, 49.0]   # its steps 21..24 wrapped around
    assert segment[4:] == [float(2 * j + 1) for j in range(4, 21)]


def test_sampling_draws_only_the_asked_global_steps_whole_and_uniformly():
    buffer = SharedReplay.create(40, obs_dim=3, actors=2)
    fill(buffer, 0, 15)
    fill(buffer, 1, 15)
    batch = buffer.sample(6, 24, 6000, torch.Generator().manual_seed(0))
    steps = batch.obs[:, 0]
    assert set(steps.tolist()) == {float(g) for g in range(6, 24)}
    assert (steps % 2 == batch.obs[:, 1]).all()      # step g is actor g % 2's
    assert torch.equal(batch.next_obs[:, 0], steps + 1)
    assert torch.equal(batch.rewards, steps)
    assert torch.equal(batch.actions, steps.long() % 2)
    assert (steps < 15).float().mean().item() == pytest.approx(9 / 18, abs=0.03)


def test_the_same_generator_draws_the_same_rows():
    buffer = SharedReplay.create(40, obs_dim=3, actors=2)
    fill(buffer, 0, 10)
    fill(buffer, 1, 10)
    once = buffer.sample(0, 20, 32, torch.Generator().manual_seed(5))
    again = buffer.sample(0, 20, 32, torch.Generator().manual_seed(5))
    assert torch.equal(once.obs, again.obs)


def test_state_round_trip():
    buffer = SharedReplay.create(40, obs_dim=3, actors=2)
    fill(buffer, 0, 13)
    saved = buffer.state()
    other = SharedReplay.create(40, obs_dim=3, actors=2)
    other.load_state(saved)
    same = [name for name, a, b in zip(saved, buffer.tensors(), other.tensors())
            if torch.equal(a, b)]
    assert same == ["obs", "actions", "rewards", "next_obs", "dones", "counts"]
    # but the last row of a resumed actor ends its episode: it starts a fresh one
    assert torch.equal(other.ends[:12], buffer.ends[:12]) and other.ends[12]
    assert not buffer.ends[12]
    assert other.next_step(0) == 26


def _child_fills(buffer, actor):
    fill(buffer, actor, 30)


def test_another_process_writes_are_seen_by_the_learner():
    buffer = SharedReplay.create(64, obs_dim=3, actors=2)
    context = multiprocessing.get_context("fork")
    child = context.Process(target=_child_fills, args=(buffer, 1))
    child.start()
    child.join(timeout=30)
    if child.is_alive():
        child.kill()
        child.join()
    assert child.exitcode == 0
    assert buffer.counts.tolist() == [0, 30]
    assert buffer.obs[33 + 29, 0].item() == 2 * 29 + 1
