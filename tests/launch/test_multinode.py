"""Two torchrun agents on loopback as two nodes (c10d rendezvous, 2 ranks each): the run
matches mptrain's own 4 workers, every rank starts from rank 0's model, a restarted group
resumes from the last checkpoint bitwise, and a lost node is named, never hung on."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from run_watch import live_children, poll, shm_entries
from test_torchrun import NETWORK_TROUBLE, clean_environment, own_workers_run

# Jobs of several torchrun nodes run one after the other (pyproject.toml: two tests at a time).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("nodes")]
WORKLOAD = Path(__file__).resolve().parents[1] / "launcher_workload.py"
FACTORY = ["--data", "launcher_workload:make_data", "--model", "launcher_workload:make_model",
           "--batch-size", "32", "--quiet"]
# The length of the uninterrupted runs (conftest.uninterrupted_two_node_run) that tests
# compare theirs with: 8 steps an epoch.
REFERENCE_EPOCHS = 3


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class TwoNodes:
    """Two torchrun agents, each a "node" of 2 ranks, meeting at a c10d rendezvous; their
    output goes to node0.log / node1.log in ``folder``. On loopback by default; ``hosts``
    (test_two_hosts.TwoHosts) puts each agent in a network namespace of its own."""

    def __init__(self, folder: Path, args: list[str], env: dict | None = None,
                 launcher_args: tuple = (), hosts=None):
        shutil.copy(WORKLOAD, folder / WORKLOAD.name)
        self.folder = folder
        self.hosts = hosts
        port = free_port()
        host = "127.0.0.1" if hosts is None else hosts.addresses[0]
        self.launcher = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
                         "--nproc-per-node", "2", "--rdzv-backend", "c10d",
                         "--rdzv-endpoint", f"{host}:{port}", "--rdzv-id", f"test-{port}",
                         *launcher_args]
        self.program = ["-m", "mptrain", "run", *args]
        self.environment = {**clean_environment(), **(env or {})}
        self.logs = [open(folder / f"node{n}.log", "w") for n in range(2)]
        self.agents: list = [None, None]
        self.start(0)
        if hosts is None:
            # Both agents on loopback think they host the rendezvous store; node 0's,
            # started first, is listening before node 1's looks for it.
            poll(lambda: _listening(port) or self.agents[0].poll() is not None, 60)
        self.start(1)

    def start(self, node: int) -> None:
        """Start (or start again) node ``node``'s agent."""
        command = self.launcher + self.program
        if self.hosts is not None:
            # A namespace's host name resolves to nothing there: torchrun is told which
            # address is the node's, and which node hosts the store.
            command = self.hosts.enter(node) + self.launcher + [
                "--local-addr", self.hosts.addresses[node],
                "--rdzv-conf", f"is_host={node == 0}"] + self.program
        self.agents[node] = subprocess.Popen(command, cwd=self.folder, env=self.environment,
                                             stdout=self.logs[node], stderr=subprocess.STDOUT)

    def wait(self, timeout: float = 240) -> list[int]:
        try:
            codes = [agent.wait(timeout=timeout) for agent in self.agents]
        finally:
            self.stop()
        if any(codes):
            trouble = NETWORK_TROUBLE.search(self.output(0) + self.output(1))
            if trouble and "lost contact" not in self.output(0) + self.output(1):
                pytest.skip(f"torchrun's rendezvous cannot work in this sandbox: "
                            f"{trouble.group(0).strip()}")
        return codes

    def output(self, node: int) -> str:
        return (self.folder / f"node{node}.log").read_text()

    def stop(self) -> None:
        for agent in self.agents:
            if agent is not None and agent.poll() is None:
                agent.kill()
                agent.wait()
        for log in self.logs:
            log.close()


def run_two_nodes(folder, args, **kwargs) -> TwoNodes:
    nodes = TwoNodes(folder, args, **kwargs)
    codes = nodes.wait()
    assert codes == [0, 0], nodes.output(0) + nodes.output(1)
    return nodes


def model_at(out: Path) -> dict:
    return torch.load(out / "model.pt", weights_only=True)


@pytest.mark.timeout(400)
@pytest.mark.parametrize("strategy", ["sync", "ddp", "fedavg"])
def test_two_nodes_train_like_four_own_workers(tmp_path, strategy, uninterrupted_two_node_run,
                                               monkeypatch):
    before = {e for e in shm_entries() if e.startswith("mptrain-node-")}
    if strategy == "fedavg":
        args = FACTORY + ["--strategy", strategy, "--rounds", "3", "--clients", "8",
                          "--clients-per-round", "4"]
        run_two_nodes(tmp_path, args + ["--out", "torchrun"])
        torchrun = tmp_path / "torchrun"
    else:
        args = FACTORY + ["--strategy", strategy, "--epochs", str(REFERENCE_EPOCHS)]
        torchrun = uninterrupted_two_node_run(strategy)
        shutil.copy(WORKLOAD, tmp_path / WORKLOAD.name)
    assert own_workers_run(tmp_path, ["run", *args, "--workers", "4", "--out", "own"],
                           monkeypatch) == 0

    summary = json.loads((torchrun / "summary.json").read_text())
    assert (summary["workers"], summary["strategy"]) == (4, strategy)
    rows = (torchrun / "metrics.jsonl").read_text().splitlines()
    assert len(rows) == 3
    theirs, ours = model_at(torchrun), model_at(tmp_path / "own")
    assert theirs.keys() == ours.keys()
    for key in ours:  # the same maths, summed in another order
        assert torch.allclose(theirs[key].float(), ours[key].float(), rtol=0, atol=1e-5), key
    # The data set and the node's collectives lived in /dev/shm only while ranks mapped them.
    assert {e for e in shm_entries() if e.startswith("mptrain-node-")} <= before


@pytest.mark.timeout(500)
# One strategy: resuming is the launcher's and the checkpoint's, the same for both (sync
# across nodes is covered by test_two_nodes_train_like_four_own_workers).
@pytest.mark.parametrize("strategy", ["ddp"])
def test_a_restarted_group_resumes_bitwise(tmp_path, strategy, uninterrupted_two_node_run):
    """Rank 3 (node 1) dies in epoch 2 of torchrun's first attempt; torchrun restarts both
    nodes; mptrain resumes from the epoch-1 checkpoint with no flag and ends with the model
    of an uninterrupted run, bit for bit."""
    args = FACTORY + ["--strategy", strategy, "--epochs", str(REFERENCE_EPOCHS)]
    (tmp_path / "crash").mkdir()
    nodes = run_two_nodes(tmp_path / "crash", args + ["--out", "out"],
                          env={"CRASH_RANK": "3", "CRASH_STEP": "12"},  # 8 steps per epoch
                          launcher_args=("--max-restarts", "1"))
    logs = nodes.output(0) + nodes.output(1)
    assert "exitcode: 3" in logs or "exitcode  : 3" in logs or "Restarting" in logs, logs
    assert logs.count("resuming after epoch 1") == 1, logs   # rank 0 speaks for the job
    clean = model_at(uninterrupted_two_node_run(strategy))
    resumed = model_at(tmp_path / "crash" / "out")
    for key in clean:
        assert torch.equal(clean[key], resumed[key]), key
    rows = [json.loads(line) for line in
            (tmp_path / "crash" / "out" / "metrics.jsonl").read_text().splitlines()]
    assert [row["epoch"] for row in rows] == list(range(1, REFERENCE_EPOCHS + 1))


@pytest.mark.timeout(300)
def test_a_lost_node_is_named_by_the_survivors(tmp_path):
    """SIGKILL node 1's agent mid-run: its ranks die with it (none is left behind) and node
    0's ranks stop, naming the ranks they lost, instead of hanging. (When the node that
    hosts the rendezvous store goes, torchrun's agents stop every rank themselves.)

    Every process builds a different model here (UNSEEDED), as an unseeded user model
    would: every rank of both nodes still starts training from rank 0's."""
    marks = tmp_path / "marks"
    marks.mkdir()
    nodes = TwoNodes(tmp_path, FACTORY + ["--strategy", "sync", "--sync-every", "1",
                                          "--epochs", "50"],
                     env={"STEP_DELAY": "0.02", "MARK_DIR": str(marks), "UNSEEDED": "1"})
    try:
        started = poll(lambda: len(list(marks.glob("initial-*.pt"))) == 4, timeout=120)
        assert started, nodes.output(0) + nodes.output(1)
        victim, survivor = nodes.agents[1], nodes.agents[0]
        victim.send_signal(signal.SIGKILL)
        code = survivor.wait(timeout=120)
    finally:
        nodes.stop()
    output = nodes.output(0)
    assert code != 0, output
    lost = [line for line in output.splitlines() if "lost contact with the job" in line]
    assert lost, output
    assert any("lost rank(s) 2, 3 on node(s) 1" in line for line in lost), lost
    initial = [torch.load(marks / f"initial-{rank}.pt", weights_only=True)
               for rank in range(4)]
    for other in initial[1:]:
        for key, value in initial[0].items():
            assert torch.equal(value, other[key]), key
    assert poll(lambda: not live_children(), timeout=30), live_children()
