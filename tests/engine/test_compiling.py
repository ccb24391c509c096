"""--compile's pieces: the refusals, the order in which workers compile, and a warm-up
that leaves the model, its gradients and the random generators as they were."""

import multiprocessing
import queue

import pytest
import torch
import torch.nn as nn

from mptrain.engine import compiling
from mptrain.engine.compiling import (compile_key, compile_refusal, first_compile_in_turn,
                                      warm_up)


def test_without_a_cpp_compiler_cpu_compiles_are_refused_with_the_fix(monkeypatch):
    monkeypatch.setattr(compiling.shutil, "which", lambda name: None)
    reason = compile_refusal("cpu")
    assert "C++ compiler" in reason and "without --compile" in reason


def test_an_unsupported_python_is_refused(monkeypatch):
    import torch._dynamo.eval_frame as eval_frame
    monkeypatch.setattr(eval_frame, "is_dynamo_supported", lambda: False)
    assert "cannot compile on Python" in compile_refusal("cpu")


def test_the_key_follows_the_network_and_the_batch_shape():
    net, inputs = nn.Linear(4, 2), torch.zeros(8, 4)
    key = compile_key(net, inputs, "default", "32")
    assert key == compile_key(nn.Linear(4, 2), torch.ones(8, 4), "default", "32")
    assert key != compile_key(nn.Linear(4, 3), inputs, "default", "32")
    assert key != compile_key(net, torch.zeros(16, 4), "default", "32")
    assert key != compile_key(net, inputs, "default", "bf16")


def _enter(locks, key, entered, release, results):
    with first_compile_in_turn(key, locks) as first:
        entered.put(first)
        if first:
            release.wait(30)
    results.put(first)


def test_one_worker_compiles_first_and_the_others_wait_for_it(tmp_path):
    context = multiprocessing.get_context("fork")
    entered, results, release = context.Queue(), context.Queue(), context.Event()
    workers = [context.Process(target=_enter, args=(tmp_path, "k", entered, release, results))
               for _ in range(3)]
    for worker in workers:
        worker.start()
    try:
        assert entered.get(timeout=30) is True
        # While the first holds the lock the others cannot be inside.
        with pytest.raises(queue.Empty):
            entered.get(timeout=0.5)
        release.set()
        assert sorted(entered.get(timeout=30) for _ in range(2)) == [False, False]
        assert sorted(results.get(timeout=30) for _ in range(3)) == [False, False, True]
    finally:
        release.set()
        for worker in workers:
            worker.join(30)
            if worker.is_alive():
                worker.kill()
                worker.join()
    assert all(worker.exitcode == 0 for worker in workers)
    # Later workers (another run) do not wait at all.
    with first_compile_in_turn("k", tmp_path) as first:
        assert first is False


def test_a_failed_first_compile_leaves_the_turn_to_the_next(tmp_path):
    with pytest.raises(RuntimeError):
        with first_compile_in_turn("k", tmp_path):
            raise RuntimeError("compile failed")
    with first_compile_in_turn("k", tmp_path) as first:
        assert first is True


def test_the_warm_up_gives_back_buffers_gradients_and_random_state():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Dropout(0.5), nn.Linear(8, 2))
    inputs = torch.randn(16, 4)
    buffers = {k: v.clone() for k, v in net.named_buffers()}
    state = torch.get_rng_state()

    def step():
        loss = net(inputs).sum()
        loss.backward()
        return loss

    seconds = warm_up(net, step)
    assert seconds >= 0
    assert all(torch.equal(v, buffers[k]) for k, v in net.named_buffers())
    assert all(p.grad is None for p in net.parameters())
    assert torch.equal(torch.get_rng_state(), state)
