"""Two hosts with addresses of their own: two network namespaces joined by a veth pair, a
torchrun agent in each. gloo has to find the interface that reaches the other host (not
loopback, not the host name's address), a killed agent is reported by the other host, and
an agent started again rejoins the job, which resumes from its checkpoint bit for bit.

Needs root (``ip netns``); skipped with the reason where that is not permitted.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess

import pytest
import torch
from run_watch import live_children, poll
from test_multinode import FACTORY, REFERENCE_EPOCHS, TwoNodes, model_at

# Jobs of several torchrun nodes run one after the other (pyproject.toml: two tests at a time).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("nodes")]
_OURS = re.compile(r"mpt(\d+)[ab]$")


class TwoHosts:
    """Namespaces mpt<pid>a (10.231.0.1) and mpt<pid>b (10.231.0.2), each with loopback
    and one end of a veth pair; nothing else is reachable from them."""

    addresses = ("10.231.0.1", "10.231.0.2")

    def __init__(self):
        tag = f"mpt{os.getpid()}"
        self.names = (f"{tag}a", f"{tag}b")

    def create(self) -> str | None:
        """Set the hosts up; the reason they cannot be, or None."""
        if shutil.which("ip") is None:
            return "iproute2's ip is not installed"
        self._remove_orphans()
        steps = [["netns", "add", self.names[0]], ["netns", "add", self.names[1]],
                 ["link", "add", self.names[0], "type", "veth", "peer", "name",
                  self.names[1]]]
        for name, address in zip(self.names, self.addresses):
            steps += [["link", "set", name, "netns", name],
                      ["-n", name, "addr", "add", f"{address}/24", "dev", name],
                      ["-n", name, "link", "set", name, "up"],
                      ["-n", name, "link", "set", "lo", "up"]]
        for step in steps:
            done = subprocess.run(["ip", *step], capture_output=True, text=True, timeout=30)
            if done.returncode != 0:
                self.remove()
                return f"`ip {' '.join(step)}` failed: {done.stderr.strip()} (needs root)"
        return None

    def enter(self, host: int) -> list[str]:
        return ["ip", "netns", "exec", self.names[host]]

    def remove(self) -> None:
        """Delete both namespaces (the veth pair goes with them, or by name when setting up
        stopped before it was moved into them)."""
        for name in self.names:
            subprocess.run(["ip", "netns", "delete", name], capture_output=True, timeout=30)
        subprocess.run(["ip", "link", "delete", self.names[0]], capture_output=True,
                       timeout=30)

    @staticmethod
    def _remove_orphans() -> None:
        """Namespaces an earlier test process could not delete (it was killed)."""
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                                timeout=30).stdout.split()
        for name in listed:
            found = _OURS.match(name)
            if found and not os.path.exists(f"/proc/{found.group(1)}"):
                subprocess.run(["ip", "netns", "delete", name], capture_output=True,
                               timeout=30)


@pytest.fixture
def two_hosts():
    hosts = TwoHosts()
    reason = hosts.create()
    if reason is not None:
        pytest.skip(f"two network namespaces cannot be set up here: {reason}")
    yield hosts
    hosts.remove()


@pytest.mark.timeout(500)
def test_a_killed_host_is_reported_then_rejoins_and_the_job_resumes(tmp_path, two_hosts,
                                                                     uninterrupted_two_node_run):
    """Host b's agent is SIGKILLed after the first checkpoint: host a's rank 0 names the
    ranks it lost; torchrun (``--max-restarts``) waits for the node to come back; a new
    agent on host b rejoins and the job ends with the model of an uninterrupted run -- the
    same, bit for bit, as on loopback: gloo's sums do not depend on the wire."""
    args = FACTORY + ["--strategy", "sync", "--epochs", str(REFERENCE_EPOCHS), "--out", "out"]
    # ~0.8 s an epoch: the kill lands with epochs to go. torchrun (2.13) does not hand a
    # node that joins after a restart the address of its own store: it must not share it.
    slow = {"STEP_DELAY": "0.1", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    folder = tmp_path / "killed"
    folder.mkdir()
    nodes = TwoNodes(folder, args, env=slow, hosts=two_hosts,
                     launcher_args=("--max-restarts", "1"))
    try:
        written = poll(lambda: (folder / "out" / "checkpoint.pt").exists(), timeout=180)
        assert written, nodes.output(0) + nodes.output(1)
        nodes.agents[1].send_signal(signal.SIGKILL)
        nodes.agents[1].wait()
        reported = poll(lambda: "lost contact with the job" in nodes.output(0), timeout=60)
        assert reported, nodes.output(0)
        nodes.start(1)
        codes = nodes.wait()
    finally:
        nodes.stop()
    output = nodes.output(0)
    assert codes == [0, 0], output + nodes.output(1)
    lost = [line for line in output.splitlines() if "lost contact with the job" in line]
    assert any("lost rank(s) 2, 3 on node(s) 1" in line for line in lost), lost
    assert (output + nodes.output(1)).count("resuming after epoch") == 1, output
    clean, resumed = model_at(uninterrupted_two_node_run("sync")), model_at(folder / "out")
    for key in clean:
        assert torch.equal(clean[key], resumed[key]), key
    rows = [json.loads(line) for line in
            (folder / "out" / "metrics.jsonl").read_text().splitlines()]
    assert [row["epoch"] for row in rows] == list(range(1, REFERENCE_EPOCHS + 1))
    assert poll(lambda: not live_children(), timeout=30), live_children()
