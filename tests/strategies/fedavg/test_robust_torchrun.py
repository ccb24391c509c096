"""Robust rules and attacks under torchrun (issue 41): each rank's clients' rows are gathered
to rank 0, which applies the rule as mptrain's own workers do over their shared table, so
the model is bitwise theirs -- on one node (2 ranks) and on two (4 ranks, the rows crossing
between node leaders) -- with the same attackers sampled, chosen and skipped rounds.

The gather itself is tested without processes: two threads, each a rank, over a group whose
broadcast is a dict and a barrier."""

from __future__ import annotations

import json
import shutil
import sys
import threading
from pathlib import Path

import pytest
import torch

from mptrain.comm.base import Group
from mptrain.strategies.fedavg.gathered import GatheredTable, slot_owners

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "launch"))

ROUND_KEYS = ("malicious", "malicious_reported", "malicious_selected", "selected", "skipped",
              "reported")


class ThreadGroup:
    """A group of ranks that are threads: broadcast_ copies the source's tensors through a
    dict between two barriers (bounded waits: a missing rank breaks the barrier). Its
    gather is ``Group``'s own, built on that broadcast; ``most``: its collectives' bytes."""

    def __init__(self, world_size: int, most: int | None = None):
        self.world_size, self.most = world_size, most
        self.barrier = threading.Barrier(world_size, timeout=10)
        self.board: dict = {}
        self.calls = 0

    def rank_view(self, rank: int):
        group = self

        class View(Group):
            def __init__(self):
                self.rank, self.world_size = rank, group.world_size

            def barrier(self):
                group.barrier.wait()

            def average_(self, tensors):
                raise AssertionError("the gather averages nothing")

            def collective_bytes(self):
                return group.most

            def broadcast_(self, tensors, src=0):
                if rank == src:
                    group.board["values"] = [t.clone() for t in tensors]
                    group.calls += 1
                group.barrier.wait()
                if rank != src:
                    for tensor, value in zip(tensors, group.board["values"]):
                        tensor.copy_(value)
                group.barrier.wait()
        return View()


def gather_in_threads(group, sampled, assignment, numel, weight_of):
    """Each rank (a thread) fills its clients' rows (slot ``s``: ``10 s + 1`` and a
    column index's thousandth) and weights, then gathers; returns each rank's table."""
    owners = slot_owners(sampled, assignment)
    tables, errors = {}, []

    def rank(r):
        try:
            table = GatheredTable(r, rows=len(sampled), numel=numel)
            slots = [slot for slot, owner in enumerate(owners) if owner == r]
            table.start_round(slots)
            for slot in slots:   # what each client sends, and its weight
                table.row(slot).copy_(expected_row(slot, numel))
                table.weights[slot] = weight_of(slot)
            table.gather(group.rank_view(r), owners)
            tables[r] = table
        except Exception as err:   # noqa: BLE001 - reported by the test thread
            errors.append(err)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(group.world_size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not errors and all(not t.is_alive() for t in threads), errors
    return tables


def expected_row(slot: int, numel: int) -> torch.Tensor:
    return 10.0 * slot + 1 + torch.arange(numel) / 1000


def test_rows_and_weights_gather_into_rank_zeros_table_and_nowhere_else():
    sampled = [2, 5, 7, 9, 11]
    assignment = [[5, 9], [2, 7, 11]]
    assert slot_owners(sampled, assignment) == [1, 0, 1, 0, 1]
    numel, group = 6, ThreadGroup(2)
    # slot 4 failed; slot 2's weight needs every bit of a float64
    weights = [1.0, 2.0, 1 / 3, 4.0, 0.0]
    tables = gather_in_threads(group, sampled, assignment, numel, weights.__getitem__)
    zero = tables[0]
    for slot in range(len(sampled)):
        assert torch.equal(zero.table[slot], expected_row(slot, numel))
    assert zero.weights.tolist() == weights
    # Rank 1 never holds a table: its own rows only, dropped after the gather.
    assert tables[1].table is None and tables[1]._rows == {} and tables[1]._block is None
    # One broadcast of rank 1's rows with their weights; rank 0's rows stay put.
    assert group.calls == 1


@pytest.mark.parametrize("clients", [4, 40])
@pytest.mark.parametrize("most, per_block", [(None, None),
                                             # 3 rows of 6 numbers and 2 weight columns
                                             (3 * 8 * 4, 3)])
def test_the_gather_takes_a_collective_per_rank_not_per_row(clients, most, per_block):
    """As many collectives for 40 clients as for 4 (a block per sending rank), unless the
    group's collectives hold fewer rows (a shared-memory slot holds one model): then a
    collective per block of as many rows as fit."""
    sampled = list(range(clients))
    assignment = [sampled[0::3], sampled[1::3], sampled[2::3]]
    group = ThreadGroup(3, most)
    tables = gather_in_threads(group, sampled, assignment, 6, lambda slot: slot + 0.5)
    for slot in sampled:
        assert torch.equal(tables[0].table[slot], expected_row(slot, 6))
    assert tables[0].weights.tolist() == [slot + 0.5 for slot in sampled]
    blocks = [1 if per_block is None else -(-len(rows) // per_block)
              for rows in assignment[1:]]
    assert group.calls == sum(blocks)
    if per_block is None:
        assert group.calls == 2


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def _same_run(theirs: Path, ours: Path) -> None:
    """Bitwise the same model, the same attackers counted round by round, the same skips."""
    a, b = (torch.load(o / "model.pt", weights_only=True) for o in (theirs, ours))
    assert a.keys() == b.keys()
    for key in b:
        assert torch.equal(a[key], b[key]), key
    for mine, own in zip(_rows(theirs), _rows(ours), strict=True):
        assert {k: mine.get(k) for k in ROUND_KEYS} == {k: own.get(k) for k in ROUND_KEYS}
    summaries = [json.loads((o / "summary.json").read_text()) for o in (theirs, ours)]
    assert summaries[0]["rounds_skipped"] == summaries[1]["rounds_skipped"]


# A rule of each kind with an attack of each side: Bulyan (Krum's selection on the Gram
# matrix, then coordinate-wise) against label flippers, who train; Krum with ALIE, forged
# on rank 0 from the gathered honest rows, and dropouts that leave rounds too few reports.
CASES = {
    "bulyan-label-flip": ["--data", "digits", "--clients", "20", "--clients-per-round", "8",
                          "--aggregator", "bulyan:1", "--malicious-fraction", "0.2",
                          "--attack", "label-flip"],
    "krum-alie-skips": ["--data", "linreg", "--clients", "12", "--clients-per-round", "6",
                        "--aggregator", "krum:1", "--malicious-fraction", "0.25",
                        "--attack", "alie", "--dropout-rate", "0.3"],
}


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", list(CASES))
def test_robust_rule_and_attack_under_torchrun_match_own_workers_bitwise(tmp_path, case,
                                                                         monkeypatch):
    from test_torchrun import own_workers_run, torchrun

    args = ["run", "--strategy", "fedavg", "--rounds", "4", "--seed", "3", *CASES[case]]
    out, own = tmp_path / "torchrun", tmp_path / "own"
    done = torchrun(tmp_path, args + ["--out", str(out)])
    assert done.returncode == 0, done.stderr
    if case == "bulyan-label-flip":   # the banner counts what rank 0 holds
        assert "every update gathered to rank 0, 8 clients x 38,282 parameters x 4 bytes " \
               "= 1.2 MiB there" in done.stdout
    assert own_workers_run(tmp_path, args + ["--workers", "2", "--quiet", "--out", str(own)],
                           monkeypatch) == 0
    _same_run(out, own)
    rows = _rows(out)
    assert sum(row.get("malicious", 0) for row in rows) > 0
    if case == "krum-alie-skips":
        assert any("skipped" in row for row in rows)
        assert any("skipped" not in row for row in rows)


@pytest.mark.slow
@pytest.mark.xdist_group("nodes")
@pytest.mark.timeout(400)
def test_robust_rule_across_two_nodes_matches_four_own_workers_bitwise(tmp_path, monkeypatch):
    """Rows of ranks 2 and 3 reach rank 0 through their node's shared memory and the
    leaders' gloo broadcast."""
    from test_multinode import FACTORY, WORKLOAD, run_two_nodes
    from test_torchrun import own_workers_run

    args = FACTORY + ["--strategy", "fedavg", "--rounds", "3", "--clients", "16",
                      "--clients-per-round", "8", "--aggregator", "median",
                      "--malicious-fraction", "0.25", "--attack", "gaussian:5"]
    run_two_nodes(tmp_path, args + ["--out", "torchrun"])
    shutil.copy(WORKLOAD, tmp_path / WORKLOAD.name)
    assert own_workers_run(tmp_path, ["run", *args, "--workers", "4", "--out", "own"],
                           monkeypatch) == 0
    _same_run(tmp_path / "torchrun", tmp_path / "own")
