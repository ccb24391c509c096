"""The rendezvous of mptrain's own gloo/nccl groups: a private file store, no port to race
for, nothing left behind, and gloo listening on loopback only."""

import ipaddress
import json
import os
import pickle
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from mptrain.comm.dist import DistSpec, bind_gloo_to_loopback, loopback_interface


def test_each_group_meets_in_its_own_private_folder_and_leaves_nothing():
    first, second = DistSpec("gloo", 2, 30.0), DistSpec("gloo", 2, 30.0)
    try:
        assert first.folder != second.folder
        assert os.path.isdir(first.folder)
        assert os.stat(first.folder).st_mode & 0o077 == 0  # mkdtemp: this user only
        copy = pickle.loads(pickle.dumps(first))  # what spawn'd workers receive
        assert copy.folder == first.folder
    finally:
        first.release()
        second.release()
    assert not os.path.exists(first.folder) and not os.path.exists(second.folder)
    first.release()  # twice is harmless


def _address_elsewhere_than_loopback() -> str | None:
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family == socket.AF_INET and \
                    not ipaddress.ip_address(address.address).is_loopback:
                return address.address
    return None


@pytest.mark.timeout(120)
def test_own_gloo_group_listens_on_loopback_whatever_the_host_name_resolves_to():
    """The host name is set to an address of this machine that the network reaches (in a
    user and UTS namespace of the test's own); gloo's default would bind it."""
    address = _address_elsewhere_than_loopback()
    if address is None or shutil.which("unshare") is None:
        pytest.skip("needs a non-loopback IPv4 address and unshare")
    probe = subprocess.run(["unshare", "-ru", "hostname", address], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"no user namespaces here: {probe.stderr.decode().strip()}")
    workload = Path(__file__).with_name("gloo_listen_workload.py")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("GLOO_SOCKET_IFNAME", None)
    done = subprocess.run(
        ["unshare", "-ru", "sh", "-c", 'hostname "$0" && exec "$1" "$2"', address,
         sys.executable, str(workload)],
        capture_output=True, text=True, timeout=100, env=env)
    assert done.returncode == 0, done.stderr
    listening = json.loads(done.stdout)
    assert len(listening) == 2 and all(listening), listening
    for addresses in listening:
        assert all(ipaddress.ip_address(a).is_loopback for a in addresses), listening


def test_binding_to_loopback_overrides_the_environment():
    environ = {"GLOO_SOCKET_IFNAME": "eth0"}
    bind_gloo_to_loopback(environ)
    assert environ["GLOO_SOCKET_IFNAME"] == loopback_interface()
    assert loopback_interface().startswith("lo")
