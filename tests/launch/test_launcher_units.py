"""The pieces of the torchrun path that need no job: node layout, loopback binding, node
memory names."""

import os

import torch

from mptrain.comm.hierarchical import Topology
from mptrain.launch.launcher import bind_gloo_to_loopback_if_local
from mptrain.launch.node_memory import NodeMemory, remove_orphans


def test_topology_groups_ranks_by_node_in_node_order():
    topology = Topology.from_ranks([1, 1, 0, 0, 2])
    assert topology.nodes == ((2, 3), (0, 1), (4,))
    assert topology.leaders == [2, 0, 4]
    assert (topology.node_index(1), topology.local_rank(1)) == (1, 1)


def test_gloo_is_kept_on_loopback_only_for_a_local_job():
    local = {"MASTER_ADDR": "localhost"}
    bind_gloo_to_loopback_if_local(local)
    assert local["GLOO_SOCKET_IFNAME"].startswith("lo")
    for host in ("127.0.0.1", "::1"):
        environ = {"MASTER_ADDR": host}
        bind_gloo_to_loopback_if_local(environ)
        assert "GLOO_SOCKET_IFNAME" in environ
    remote = {"MASTER_ADDR": "10.0.0.7"}
    bind_gloo_to_loopback_if_local(remote)
    assert "GLOO_SOCKET_IFNAME" not in remote
    chosen = {"MASTER_ADDR": "localhost", "GLOO_SOCKET_IFNAME": "eth1"}
    bind_gloo_to_loopback_if_local(chosen)
    assert chosen["GLOO_SOCKET_IFNAME"] == "eth1"   # the user's choice stands


def test_node_memory_is_shared_by_name_then_unlinked(tmp_path):
    leader = NodeMemory(os.getpid(), True, folder=tmp_path)
    written = leader.allocate(2, 3)
    written.copy_(torch.arange(6, dtype=torch.uint8).view(2, 3))
    follower = NodeMemory(os.getpid(), False, folder=tmp_path)
    seen = follower.allocate(2, 3)
    assert torch.equal(seen, written)
    leader.unlink_all()
    assert list(tmp_path.iterdir()) == []
    seen[0, 0] = 42                      # the mapping outlives the name
    assert written[0, 0] == 42


def test_buffers_of_a_dead_leader_are_removed(tmp_path):
    dead = 2 ** 22 + 12345               # above the default pid_max: no such process
    (tmp_path / f"mptrain-node-{dead}-0").write_bytes(b"x")
    (tmp_path / f"mptrain-node-{os.getpid()}-0").write_bytes(b"x")
    (tmp_path / "unrelated").write_bytes(b"x")
    remove_orphans(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == \
        sorted([f"mptrain-node-{os.getpid()}-0", "unrelated"])
