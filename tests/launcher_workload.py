"""Data and model factories for torchrun tests: one rank misbehaves on request.

``CRASH_RANK``/``CRASH_STEP``: that global rank exits with code 3 at that training step of
torchrun's first attempt (so a restarted group runs clean). ``STEP_DELAY``: seconds per
step, to keep a run going while a test acts on it. ``MARK_DIR``: each rank saves the
parameters it starts training from there as ``initial-RANK.pt`` at its first step, and the
times it was imported, made its first step and exited (benchmarks/scale_out.py).
``UNSEEDED``: every process builds a different model (as a user's unseeded model would).
"""
import atexit
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn
from torch.utils.data import TensorDataset

CRASH_RANK = int(os.environ.get("CRASH_RANK", "-1"))
CRASH_STEP = int(os.environ.get("CRASH_STEP", "0"))
STEP_DELAY = float(os.environ.get("STEP_DELAY", "0"))
MARK_DIR = os.environ.get("MARK_DIR")


def _mark(name: str) -> None:
    """Write the time now to MARK_DIR/name (benchmarks/scale_out.py reads them)."""
    if MARK_DIR:
        (Path(MARK_DIR) / name).write_text(repr(time.time()))


_ATTEMPT = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
if os.environ.get("RANK"):
    _mark(f"imported-{_ATTEMPT}-{os.environ['RANK']}")
    atexit.register(_mark, f"exit-{_ATTEMPT}-{os.environ['RANK']}")


def make_data():
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(1024, 1, 8, 8, generator=generator)
    targets = torch.randint(0, 10, (1024,), generator=generator)
    test = TensorDataset(inputs[:128].clone(), targets[:128].clone())
    return TensorDataset(inputs, targets), test


def make_model():
    if os.environ.get("UNSEEDED"):
        torch.manual_seed(os.getpid())
    return SteppedNet()


class SteppedNet(nn.Module):
    """A small CNN with BatchNorm (buffers travel too) that counts its training steps."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(),
                                  nn.Flatten(), nn.Linear(4 * 6 * 6, 10))
        self.steps = 0

    def forward(self, x):
        rank = int(os.environ.get("RANK", "-1"))
        if self.training and rank >= 0 and _in_training_round():
            if self.steps == 0 and MARK_DIR:
                # Whole or absent: a test that sees the file may SIGKILL this rank next.
                final = Path(MARK_DIR) / f"initial-{rank}.pt"
                torch.save(self.state_dict(), final.with_suffix(".tmp"))
                os.replace(final.with_suffix(".tmp"), final)
                _mark(f"first-step-{_ATTEMPT}-{rank}")
            if rank == CRASH_RANK and self.steps == CRASH_STEP and \
                    os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0":
                _mark("crash")
                os._exit(3)
            self.steps += 1
            if STEP_DELAY:
                time.sleep(STEP_DELAY)
        return self.body(x)


def _in_training_round() -> bool:
    """Called from a strategy's training round, not from mptrain's preflight probes."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "train_round":
            return True
        frame = frame.f_back
    return False
