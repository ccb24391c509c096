"""The driver's start line: no rank starts its first round before every rank is set up."""

import time
from types import SimpleNamespace

import torch

from mptrain.engine.loop import WorkerSetup, train
from mptrain.strategies.base import RoundWork


class RecordingGroup:
    rank, world_size = 0, 2

    def __init__(self, events):
        self.events = events

    def barrier(self):
        self.events.append("barrier")

    def average_(self, tensors):
        pass


class RecordingProgram:
    def __init__(self, events):
        self.events = events
        events.append("set up")

    def train_round(self, index):
        self.events.append(f"round {index}")
        now = time.monotonic()
        return RoundWork(steps=1, samples=1, loss_sum=0.0, started=now, ended=now)

    def eval_model(self):
        return torch.nn.Identity()

    def publish(self, shared_model):
        pass

    def close(self):
        self.events.append("closed")


def test_every_rank_is_set_up_before_any_rank_trains():
    events = []
    config = SimpleNamespace(seed=0, units=2, eval_every=1, target_accuracy=None,
                             eval_batch_size=8)
    strategy = SimpleNamespace(program=lambda setup: RecordingProgram(events))
    setup = WorkerSetup(rank=0, config=config,
                        data=SimpleNamespace(test=None, task="classification"), model=None,
                        strategy=strategy, group=RecordingGroup(events),
                        progress=SimpleNamespace(beat=lambda: None, counted=lambda: 0),
                        report=lambda r: None,
                        device=torch.device("cpu"))
    train(setup)
    # The first barrier is the start line: between set-up and the first round. The others
    # end each round. The program is closed after its last round.
    assert events == ["set up", "barrier", "round 0", "barrier", "round 1", "barrier",
                      "closed"]
