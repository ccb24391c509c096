"""Several ranks in one process taking turns between the shared-memory collectives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch.utils.data import TensorDataset

from mptrain.cli import main
from mptrain.comm.base import CollectiveTimeout
from mptrain.comm.shm import ShmGroupState
from mptrain.api import bundle_from_datasets
from mptrain.launch import plan as plan_module
from mptrain.launch.turns import HostedRankFailed, Turns


class Row:
    """A board row that records what it is told."""

    def __init__(self):
        self.beats, self.waiting_now, self.waited = 0, False, 0

    def beat(self):
        self.beats += 1

    def waiting(self, flag):
        self.waiting_now = flag
        self.waited += flag


def host(world: int, body, rows=None, timeout_s: float = 30.0):
    """Run ``body(rank, group)`` for every rank of a ``world``-rank group in this process
    (the only process of the group); fill ``rows`` with each rank's board row."""
    rows = {} if rows is None else rows
    state = ShmGroupState.create(world, 64, torch.float32, timeout_s, oversubscribed=True)
    turns = Turns(process=0, processes=1)
    for rank in range(world):
        rows[rank] = Row()
        group = state.attach(rank, rows[rank], turns=turns)
        turns.add(rank, lambda rank=rank, group=group: body(rank, group), rows[rank])
    turns.run()
    return rows


def test_ranks_taking_turns_average_and_broadcast_like_ranks_of_their_own():
    results = {}

    def body(rank, group):
        values = torch.arange(8, dtype=torch.float32) * (rank + 1)
        group.average_([values])
        mean = values.clone()
        group.broadcast_([values], src=3)
        results[rank] = (mean, values)

    rows = host(5, body)
    for rank in range(5):
        mean, broadcast = results[rank]
        assert torch.equal(mean, torch.arange(8, dtype=torch.float32) * 3), rank  # 1..5: 3
        assert torch.equal(broadcast, mean), rank
        assert rows[rank].waited > 0   # it did wait for the others of its process


def test_no_rank_passes_a_barrier_before_every_rank_reached_it():
    log = []

    def body(rank, group):
        for round_ in range(3):
            log.append(("before", round_, rank))
            group.barrier()
            log.append(("after", round_, rank))

    host(4, body)
    for round_ in range(3):
        last_arrival = max(i for i, e in enumerate(log) if e[:2] == ("before", round_))
        first_departure = min(i for i, e in enumerate(log) if e[:2] == ("after", round_))
        assert last_arrival < first_departure, round_


def test_each_rank_keeps_its_own_generator_and_grad_mode():
    draws = {}

    def body(rank, group):
        torch.default_generator.manual_seed(100 + rank)
        torch.set_grad_enabled(rank % 2 == 0)
        mine = []
        for _ in range(3):
            group.barrier()   # the other ranks run in between, seeding and drawing their own
            mine.append(torch.rand(2))
            assert torch.is_grad_enabled() == (rank % 2 == 0)
        draws[rank] = torch.stack(mine)

    with torch.enable_grad():
        before = torch.get_rng_state()
        host(3, body)
        assert torch.is_grad_enabled() and torch.equal(torch.get_rng_state(), before)
    for rank in range(3):
        generator = torch.Generator().manual_seed(100 + rank)
        assert torch.equal(draws[rank], torch.rand(3, 2, generator=generator)), rank


def test_a_rank_that_raises_is_named():
    def body(rank, group):
        group.barrier()
        if rank == 2:
            raise ValueError("boom")
        group.barrier()

    with pytest.raises(HostedRankFailed, match=r"rank 2: ValueError: boom"):
        host(3, body)


def test_a_process_whose_peer_process_never_comes_times_out_naming_its_ranks():
    # One process hosts ranks 0 and 1 of a 3-rank group; the process of rank 2 never comes.
    state = ShmGroupState.create(3, 64, torch.float32, 0.3, oversubscribed=True)
    turns = Turns(process=0, processes=2)
    rows = {rank: Row() for rank in (0, 1)}
    for rank in (0, 1):
        group = state.attach(rank, rows[rank], turns=turns)
        turns.add(rank, group.barrier, rows[rank])
    with pytest.raises(HostedRankFailed,
                       match=r"rank 1: CollectiveTimeout: .*barrier for rank\(s\) \[2\]") as err:
        turns.run()
    assert isinstance(err.value.__cause__, CollectiveTimeout)
    assert rows[0].beats > 0 and rows[1].beats > 0   # both beat while the process slept


def test_a_rank_cannot_reach_a_barrier_in_inference_mode():
    def body(rank, group):
        with torch.inference_mode():
            group.barrier()

    with pytest.raises(HostedRankFailed, match="inference_mode"):
        host(2, body)


# -- where ranks take turns ----------------------------------------------------------------

def _layout(strategy: str, workers: int, cores: int, **config):
    from mptrain.config import TrainConfig
    from mptrain.strategies import make_strategy

    config = TrainConfig(strategy=strategy, workers=workers, **config)
    data = bundle_from_datasets(TensorDataset(torch.randn(64, 4), torch.arange(64) % 2), None)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(plan_module, "usable_cores", lambda: cores)
        return plan_module.plan_workers(config, make_strategy(config), torch.nn.Linear(4, 2),
                                        data)


@pytest.mark.parametrize("strategy, workers, cores, options, processes", [
    ("sync", 64, 2, {}, 2),
    ("ddp", 8, 2, {}, 2),
    ("sync", 2, 2, {}, None),             # no more workers than cores: a process each
    ("sync", 5, 2, {}, None),             # 3 and 2: the smaller process would wait
    ("sync", 8, 4, {"threads_per_worker": 2}, 2),   # a process per 2 cores' threads
    ("hogwild", 64, 2, {}, None),         # never waits at a collective within an epoch
    ("fedavg", 8, 2, {}, None),           # simulates its clients in few processes already
    ("ddp", 8, 2, {"ddp_backend": "gloo"}, None),   # torch's DDP: a process per rank
])
def test_ranks_take_turns_only_where_they_can(strategy, workers, cores, options, processes):
    assert _layout(strategy, workers, cores, **options).processes == processes


def test_threads_and_turns_come_from_one_reading_of_the_cores():
    assert _layout("sync", 2, 64).threads == 32
    assert _layout("sync", 4, 2).threads == 1


def test_ranks_are_split_into_runs_of_consecutive_ranks():
    assert _layout("sync", 6, 3).ranks_of_processes() == [[0, 1], [2, 3], [4, 5]]
    assert _layout("sync", 2, 2).ranks_of_processes() == [[0], [1]]


def _run(args, monkeypatch, cores: int) -> dict:
    monkeypatch.setattr(plan_module, "usable_cores", lambda: cores)
    try:
        code = main(args)
    except SystemExit as exit_:
        code = exit_.code
    assert code == 0
    out = Path(args[args.index("--out") + 1])
    return json.loads((out / "summary.json").read_text())


@pytest.mark.parametrize("strategy", ["sync", "ddp"])
def test_ranks_taking_turns_train_bit_for_bit_like_a_process_each(tmp_path, monkeypatch,
                                                                   strategy):
    args = ["run", "--quiet", "--strategy", strategy, "--workers", "4", "--epochs", "2",
            "--seed", "5"]
    turns = _run(args + ["--out", str(tmp_path / "turns")], monkeypatch, cores=2)
    own = _run(args + ["--out", str(tmp_path / "own")], monkeypatch, cores=4)
    assert (turns["processes"], own["processes"]) == (2, 4)

    ours, theirs = (torch.load(tmp_path / name / "model.pt") for name in ("turns", "own"))
    for key in theirs:
        assert torch.equal(ours[key], theirs[key]), key
    losses = [[json.loads(line)["train_loss"] for line in
               (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
              for name in ("turns", "own")]
    assert losses[0] == losses[1] and len(losses[0]) == 2
