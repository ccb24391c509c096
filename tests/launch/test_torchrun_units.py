"""The pieces of the torchrun path that need no job: node layout, gloo's interface,
node memory names."""

import datetime
import os
import signal
import socket
import threading
from types import SimpleNamespace

import psutil
import pytest
import torch

from mptrain.comm.hierarchical import Topology
from mptrain.errors import Interrupted, UserError
from mptrain.launch import torchrun as launcher
from mptrain.launch.torchrun import choose_gloo_interface
from mptrain.launch.node_memory import NodeMemory, new_token, remove_orphans


def test_topology_groups_ranks_by_node_in_node_order():
    topology = Topology.from_ranks([1, 1, 0, 0, 2])
    assert topology.nodes == ((2, 3), (0, 1), (4,))
    assert topology.leaders == [2, 0, 4]
    assert (topology.node_index(1), topology.local_rank(1)) == (1, 1)


def test_gloo_listens_on_loopback_for_a_local_job_else_where_the_other_nodes_are():
    local = {"MASTER_ADDR": "localhost"}
    choose_gloo_interface(local)
    assert local["GLOO_SOCKET_IFNAME"].startswith("lo")
    for host in ("127.0.0.1", "::1"):
        environ = {"MASTER_ADDR": host}
        choose_gloo_interface(environ)
        assert environ["GLOO_SOCKET_IFNAME"].startswith("lo")
    chosen = {"MASTER_ADDR": "localhost", "GLOO_SOCKET_IFNAME": "eth1"}
    choose_gloo_interface(chosen)
    assert chosen["GLOO_SOCKET_IFNAME"] == "eth1"   # the user's choice stands
    # A rendezvous host on another network: the interface that routes there, found from
    # this machine's own non-loopback addresses (the kernel routes to them through it).
    own = [(name, a.address) for name, addresses in psutil.net_if_addrs().items()
           for a in addresses if a.family == socket.AF_INET
           and not a.address.startswith("127.")]
    for name, address in own:
        environ = {"MASTER_ADDR": address}
        choose_gloo_interface(environ)
        assert environ["GLOO_SOCKET_IFNAME"] == name


def test_node_memory_is_shared_by_name_then_unlinked(tmp_path):
    token = new_token()
    leader = NodeMemory(os.getpid(), True, token, folder=tmp_path)
    written = leader.allocate(2, 3)
    written.copy_(torch.arange(6, dtype=torch.uint8).view(2, 3))
    follower = NodeMemory(os.getpid(), False, token, folder=tmp_path)
    seen = follower.allocate(2, 3)
    assert torch.equal(seen, written)
    leader.unlink_all()
    assert list(tmp_path.iterdir()) == []
    seen[0, 0] = 42                      # the mapping outlives the name
    assert written[0, 0] == 42


def test_buffers_of_a_dead_leader_are_removed(tmp_path):
    dead = 2 ** 22 + 12345               # above the default pid_max: no such process
    token = new_token()
    names = [f"mptrain-node-{dead}-0", f"mptrain-node-{dead}-{token}-0",   # then and now
             f"mptrain-node-{os.getpid()}-0", "unrelated"]
    for name in names:
        (tmp_path / name).write_bytes(b"x")
        os.utime(tmp_path / name, (1, 1))   # old: left long ago
    remove_orphans(tmp_path)
    names = names[2:]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)


def test_a_store_address_no_rank_can_reach_is_one_line_with_the_fix(monkeypatch):
    """torchrun hands its ranks the first node's host name, or "localhost" where that name
    does not resolve: the ranks of other nodes cannot reach it, and say so at once instead
    of waiting out --worker-timeout."""
    with socket.socket() as probe:      # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    monkeypatch.setenv("GROUP_RANK", "1")
    monkeypatch.setattr(launcher, "_STORE_CONNECT_S", 0.5)
    with pytest.raises(UserError) as raised:
        launcher._attempt_store(SimpleNamespace(rank=2, world_size=4),
                                datetime.timedelta(seconds=300))
    message = str(raised.value)
    assert "\n" not in message
    assert f"rank 2 (node 1) cannot reach the job's store at 127.0.0.1:{port}" in message
    assert "--local-addr" in message


def test_the_roll_call_names_who_did_not_check_in(monkeypatch):
    store = torch.distributed.HashStore()
    store.set("mptrain/roll-call/2", "here")          # rank 2 survived too
    monkeypatch.setattr(torch.distributed.distributed_c10d, "_get_default_store",
                        lambda: store)
    # Nobody else checks in: the quiet spell ends the roll call, long before its limit.
    monkeypatch.setattr(launcher, "_ROLL_CALL_S", 3600.0)
    monkeypatch.setattr(launcher, "_ROLL_CALL_QUIET_S", 0.2)
    assert launcher.lost_peers(SimpleNamespace(rank=0, world_size=4), None) == \
        "lost rank(s) 1, 3"


def test_a_stop_signal_ends_the_roll_call_at_once(monkeypatch):
    """torchrun SIGTERMs the survivors when it restarts the job: the roll call must not
    hold the rank until it is over (it would if it waited inside the store)."""
    monkeypatch.setattr(torch.distributed.distributed_c10d, "_get_default_store",
                        torch.distributed.HashStore)
    # Nobody else checks in: without the signal the roll call would end after 30 s
    # without raising, and the test would fail.
    monkeypatch.setattr(launcher, "_ROLL_CALL_S", 30.0)
    monkeypatch.setattr(launcher, "_ROLL_CALL_QUIET_S", 30.0)

    def stop(signum, frame):
        raise Interrupted(signum)

    previous = signal.signal(signal.SIGUSR1, stop)
    sender = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGUSR1))
    sender.start()
    try:
        with pytest.raises(Interrupted):
            launcher.lost_peers(SimpleNamespace(rank=0, world_size=2), None)
    finally:
        sender.cancel()
        sender.join()
        signal.signal(signal.SIGUSR1, previous)


def test_a_host_name_that_resolves_to_loopback_on_a_multi_machine_job(monkeypatch, tmp_path):
    """Debian's /etc/hosts maps the first node's own name to 127.0.1.1: routing there says
    loopback, where the other machines cannot reach gloo. The default route's interface
    is used instead; a job on this machine alone stays on loopback."""
    monkeypatch.setattr(launcher, "_interface_towards", lambda host: "lo")
    monkeypatch.setattr(launcher, "_default_route_interface", lambda: "eth9")
    spanning = {"MASTER_ADDR": "node0", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2"}
    choose_gloo_interface(spanning)
    assert spanning["GLOO_SOCKET_IFNAME"] == "eth9"
    alone = {"MASTER_ADDR": "node0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}
    choose_gloo_interface(alone)
    assert alone["GLOO_SOCKET_IFNAME"] == "lo"


def test_the_default_route_is_read_from_the_kernels_table(tmp_path):
    routes = tmp_path / "route"
    routes.write_text("Iface\tDestination\tGateway\n"
                      "eth1\t000200C0\t00000000\n"
                      "eth0\t00000000\t010200C0\n")
    assert launcher._default_route_interface(str(routes)) == "eth0"
    routes.write_text("Iface\tDestination\tGateway\neth1\t000200C0\t00000000\n")
    assert launcher._default_route_interface(str(routes)) is None
    assert launcher._default_route_interface(str(tmp_path / "absent")) is None
