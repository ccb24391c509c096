"""Runs that must end exactly as they ended when they were recorded.

Refactoring the house (strategies, launch, settings) must not change what a run computes:
``sync``, ``ddp``, ``fedavg`` and ``single`` are deterministic, so each small run below is
compared with a recording made on the code before the change (``recorded_runs.json``,
regenerated only on purpose with ``python tests/test_recorded_runs.py --record``).

The recording is bit for bit on the machine it was made on (same torch build and CPU
capability: oneDNN picks kernels by CPU, and their summation order changes the last bits);
elsewhere the same runs are compared to a tight tolerance, which still catches any change
of algorithm.
"""

from __future__ import annotations

import hashlib
import json
import platform
import sys
from pathlib import Path

import pytest
import torch

import mptrain
from mptrain.data.sources import load_data
from mptrain.models import build_model

RECORDING = Path(__file__).with_name("recorded_runs.json")

RUNS = {
    "single": dict(strategy="single", epochs=2, steps_per_epoch=6),
    "sync": dict(strategy="sync", workers=2, epochs=2, steps_per_epoch=6, sync_every=2),
    "ddp": dict(strategy="ddp", workers=2, epochs=2, steps_per_epoch=6),
    "fedavg": dict(strategy="fedavg", workers=2, rounds=2, clients=12, clients_per_round=5,
                   partition="dirichlet:0.5", server_momentum=0.5, prox_mu=0.01),
}


def machine() -> dict:
    return {"torch": torch.__version__, "cpu": torch.backends.cpu.get_cpu_capability(),
            "arch": platform.machine()}


def run(name: str) -> dict:
    bundle = load_data("digits")
    model = build_model(bundle.default_model, bundle.input_shape, bundle.output_size, 0)
    result = mptrain.fit(model, bundle, threads_per_worker=1, seed=3, **RUNS[name])
    state = result.model.state_dict()
    digest = hashlib.sha256()
    for key, tensor in state.items():
        digest.update(key.encode())
        digest.update(tensor.detach().contiguous().cpu().numpy().tobytes())
    floats = torch.cat([t.detach().reshape(-1).double() for t in state.values()
                        if t.is_floating_point()])
    return {"sha256": digest.hexdigest(),
            "param_sum": floats.sum().item(), "param_abs_sum": floats.abs().sum().item(),
            "train_losses": [m.train_loss for m in result.epochs],
            "test_accuracy": result.summary["test_accuracy"]}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_the_run_ends_as_recorded(name):
    recording = json.loads(RECORDING.read_text())
    expected = recording["runs"][name]
    got = run(name)
    if recording["machine"] == machine():
        assert got == expected
    else:
        for key in ("param_sum", "param_abs_sum", "test_accuracy"):
            assert got[key] == pytest.approx(expected[key], rel=1e-4, abs=1e-6), key
        assert got["train_losses"] == pytest.approx(expected["train_losses"], rel=1e-4)


if __name__ == "__main__" and sys.argv[1:] == ["--record"]:
    RECORDING.write_text(json.dumps({"machine": machine(),
                                     "runs": {name: run(name) for name in sorted(RUNS)}},
                                    indent=2) + "\n")
    print(f"recorded {len(RUNS)} runs in {RECORDING}")
