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
    import torch._dynamo
    monkeypatch.setattr(torch._dynamo, "is_dynamo_supported", lambda: False)
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


# -- real runs ---------------------------------------------------------------------------------

def _data(n=512):
    from torch.utils.data import TensorDataset

    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(n, 8, generator=generator)
    return TensorDataset(inputs, (inputs[:, :3].sum(1) > 0).long())


def _net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))


_COMPILED_RUN = """
import json, sys
import torch, torch.nn as nn
from torch.utils.data import TensorDataset
import mptrain

def net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))

if __name__ == "__main__":
    strategy, workers, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(512, 8, generator=generator)
    data = TensorDataset(inputs, (inputs[:, :3].sum(1) > 0).long())
    options = dict(strategy=strategy, workers=workers, epochs=2, batch_size=32, lr=0.05,
                   optimizer="sgd", momentum=0.9, quiet=True, worker_timeout=60)
    eager = mptrain.fit(net(), data, data, **options)
    compiled = mptrain.fit(net(), data, data, compile=True, out=out, **options)
    print(json.dumps({"eager": eager.test_accuracy, "compiled": compiled.test_accuracy,
                      "keys": list(compiled.model.state_dict())}))
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("strategy,workers", [("single", 1), ("sync", 2)])
def test_a_compiled_run_learns_as_the_eager_one_and_keeps_its_names(strategy, workers,
                                                                      tmp_path):
    """In a fresh process, as `mptrain run --compile` runs: a pytest worker's own earlier
    compiles (this file's, torch._dynamo.reset, explain) are no state a user's run has."""
    import json
    import subprocess
    import sys

    script = tmp_path / "compiled_run.py"
    script.write_text(_COMPILED_RUN)
    done = subprocess.run([sys.executable, str(script), strategy, str(workers),
                           str(tmp_path / "out")], capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["compiled"] > 0.7   # learnt (eager: 0.92 single, 0.76 sync x2)
    assert abs(figures["compiled"] - figures["eager"]) <= 0.02
    assert figures["keys"] == list(_net().state_dict())
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["compile"] is True


def test_without_a_compiler_the_run_is_refused_before_any_worker_starts(monkeypatch):
    import mptrain
    from mptrain.errors import UserError

    monkeypatch.setattr(compiling.shutil, "which", lambda name: None)
    with pytest.raises(UserError, match="C\\+\\+ compiler"):
        mptrain.fit(_net(), _data(), strategy="sync", workers=2, epochs=1, compile=True,
                    quiet=True)


def test_dp_refuses_compile_with_what_to_use():
    from mptrain.config import TrainConfig
    from mptrain.errors import UserError

    with pytest.raises(UserError, match="--strategy ddp --compile"):
        TrainConfig(strategy="dp", device="cuda", compile=True)


def test_stacked_clients_and_compile_are_one_or_the_other():
    from mptrain.config import TrainConfig
    from mptrain.errors import UserError
    from mptrain.strategies.fedavg.cohorts import choose_path

    config = TrainConfig(strategy="fedavg", compile=True, vectorize_clients="auto")
    check, path = choose_path(config, _net(), None, 1)
    assert check is None and not path.vectorized and "--compile" in path.reason
    with pytest.raises(UserError, match="choose one"):
        choose_path(config.replace(fedavg=config.fedavg.__class__(
            **{**config.fedavg.__dict__, "vectorize_clients": "on"})), _net(), None, 1)


def test_a_model_of_torchs_own_layers_is_really_compiled():
    """``nn.Module.compile`` traced nothing for an ``nn.Sequential`` of torch's layers."""
    from torch._dynamo.eval_frame import OptimizedModule  # noqa: F401  (dynamo loaded)
    import torch._dynamo

    torch._dynamo.reset()
    net = _net()
    compiling.compile_in_place(net, compiling.DEFAULT)
    with torch._dynamo.config.patch(error_on_recompile=False):
        explained = torch._dynamo.explain(net.forward)(torch.randn(4, 8))
    assert explained.graph_count >= 1
    assert list(net.state_dict()) == list(_net().state_dict())


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_command_compiles_from_a_fresh_process(tmp_path):
    """`mptrain run --compile` asks whether torch can compile before anything else has
    loaded dynamo: that question must not be what fails (it was, a circular import)."""
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "mptrain", "run", "--compile", "--epochs",
                           "1", "--steps-per-epoch", "5", "--quiet", "--out",
                           str(tmp_path)], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((tmp_path / "summary.json").read_text())["compile"] is True
