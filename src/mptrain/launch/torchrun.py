"""One rank of a job torchrun started: joining the job, the nodes it spans, what the ranks
of a node share, reports and checkpoints to rank 0, resuming after torchrun restarts the
group, and what a lost peer looks like.

The ranks exchange pickled objects through torch.distributed (reports, the node layout, a
checkpoint after a restart): the ranks of one job must trust each other, as with any
torch.distributed job on a private network.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import psutil
import torch.distributed as dist

from ..checkpoint import Checkpoint, load
from ..comm.base import CollectiveTimeout
from ..comm.dist import TorchDistGroup, loopback_interface
from ..comm.hierarchical import HierarchicalGroup, Topology
from ..errors import UserError
from .lifecycle import die_with_parent
from .plan import shm_group_state
from .node_memory import NodeMemory, new_token

#: run_info key of the torchrun job a checkpoint belongs to (resumed only by that job).
RUN_ID_KEY = "torchrun_run_id"
#: How long survivors of a lost peer wait for each other before naming who is missing, at
#: most; they stop sooner once nobody has checked in for _ROLL_CALL_QUIET_S (survivors see
#: a peer's connection close within moments of each other; torchrun restarts the job only
#: once they have exited).
_ROLL_CALL_S = 3.0
_ROLL_CALL_QUIET_S = 1.0
#: The agents' store exists before torchrun starts a rank: reaching it takes moments, or
#: the address torchrun handed out is wrong and waiting longer will not help.
_STORE_CONNECT_S = 30.0


def run_id() -> str:
    return os.environ.get("TORCHELASTIC_RUN_ID", "none")


def restart_count() -> int:
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)


def may_restart() -> bool:
    """Whether torchrun was given --max-restarts (it restarts every rank after a failure)."""
    return int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0") or 0) > 0


def join(world, backend: str, timeout_s: float) -> int:
    """Join the job's process group, with mptrain's timeout instead of gloo's 30 minutes;
    die with torchrun's agent (a SIGKILLed agent would otherwise leave its ranks running);
    bind gloo to the interface that reaches the other nodes (loopback when the job is on
    this machine only). Returns how many times this rank has joined the job (1 on a first
    attempt, where that can be known)."""
    die_with_parent(os.getppid())
    choose_gloo_interface()
    if dist.is_initialized():
        return 1
    timeout = datetime.timedelta(seconds=timeout_s)
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        store, attempt = _attempt_store(world, timeout)
        dist.init_process_group(backend, store=store, rank=world.rank,
                                world_size=world.world_size, timeout=timeout)
        return attempt
    dist.init_process_group(backend, init_method="env://", rank=world.rank,
                            world_size=world.world_size, timeout=timeout)
    return 1


def _attempt_store(world, timeout: datetime.timedelta):
    """The agents' store, seen through a prefix of its own for this attempt.

    torchrun's ranks share the rendezvous store across restarts without a per-attempt
    prefix, so a restarted group reads the previous attempt's gloo addresses and fails with
    "Connection refused" (pytorch#167288); TORCHELASTIC_RESTART_COUNT cannot name the
    attempt either, as it counts only this node's failures. torchrun restarts every rank
    of the job each time, so "how often has rank r joined" is the same number on every
    rank of one attempt (with a fixed number of nodes).
    """
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    connect = min(timeout.total_seconds(), _STORE_CONNECT_S)
    try:
        store = dist.TCPStore(host, port, world.world_size, is_master=False,
                              timeout=datetime.timedelta(seconds=connect))
    except dist.DistError as err:
        raise UserError(
            f"rank {world.rank} (node {os.environ.get('GROUP_RANK', '?')}) cannot reach the "
            f"job's store at {host}:{port}, the address torchrun gave it ({connect:.0f} s: "
            f"{str(err).splitlines()[0]}); when a node's host name does not resolve to an "
            f"address the other nodes reach, give torchrun --local-addr ADDRESS on every "
            f"node") from None
    store.set_timeout(timeout)
    attempt = store.add(f"mptrain/{run_id()}/joins/{world.rank}", 1)
    return dist.PrefixStore(f"mptrain/{run_id()}/attempt-{attempt}", store), attempt


def choose_gloo_interface(environ=os.environ) -> None:
    """Bind gloo to the interface that reaches the rendezvous host.

    By default gloo listens on the address its host name resolves to, which on many
    machines is 127.0.1.1 or an address other nodes cannot reach ("Connection refused"
    from the second node, the commonest multi-node failure). The interface the kernel
    would route to the rendezvous host by is one every node can reach: loopback when the
    job is on this machine only (``--standalone``, ``localhost``), so nothing listens
    beyond it. The user's GLOO_SOCKET_IFNAME always stands.
    """
    if "GLOO_SOCKET_IFNAME" in environ:
        return
    host = environ.get("MASTER_ADDR", "")
    if not host:
        return
    if host == "localhost" or _is_loopback(host):
        name = loopback_interface()
    else:
        name = _interface_towards(host)
        if name is not None and name.startswith("lo") and _spans_machines(environ):
            # The first node's name resolves to 127.0.1.1 there (Debian's /etc/hosts) while
            # the other nodes reach it by another address: the default route's interface.
            name = _default_route_interface()
    if name is not None:
        environ["GLOO_SOCKET_IFNAME"] = name


def _spans_machines(environ) -> bool:
    try:
        return int(environ["WORLD_SIZE"]) > int(environ["LOCAL_WORLD_SIZE"])
    except (KeyError, ValueError):
        return False


def _default_route_interface(routes: str = "/proc/net/route") -> str | None:
    try:
        lines = Path(routes).read_text().splitlines()[1:]
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) > 1 and fields[1] == "00000000":
            return fields[0]
    return None


def _interface_towards(host: str) -> str | None:
    """The name of the interface whose address the kernel picks to reach ``host`` (a UDP
    socket's connect sends nothing; it only chooses the route)."""
    try:
        family, _, _, _, address = socket.getaddrinfo(host, 1, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect(address)
            local = probe.getsockname()[0].split("%")[0]
    except OSError:
        return None
    for name, addresses in psutil.net_if_addrs().items():
        if any(a.address.split("%")[0] == local for a in addresses):
            return name
    return None


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class Node:
    """Where this rank sits: the job's nodes, every rank's process id, and every rank's
    random token (its node leader's names the node's buffers in /dev/shm)."""

    topology: Topology
    pids: list[int]
    rank: int
    tokens: list[str]

    @property
    def leader_pid(self) -> int:
        return self.pids[self.neighbours[0]]

    @property
    def leader_token(self) -> str:
        return self.tokens[self.neighbours[0]]

    @property
    def neighbours(self) -> tuple[int, ...]:
        """The ranks of this rank's node, itself included."""
        return self.topology.nodes[self.topology.node_index(self.rank)]

    @property
    def is_leader(self) -> bool:
        return self.neighbours[0] == self.rank


def discover(world) -> Node:
    """Every rank says which node it is on (torchrun's GROUP_RANK), its pid and a random
    token, through the job's own process group: other users of the machine never see it."""
    mine = (int(os.environ.get("GROUP_RANK", "0")), os.getpid(), new_token())
    said: list = [None] * world.world_size
    dist.all_gather_object(said, mine)
    return Node(Topology.from_ranks([node for node, _, _ in said]),
                [pid for _, pid, _ in said], world.rank, [token for _, _, token in said])


def node_group(job, world, node: Node, hierarchical: bool):
    """Put the data set in shared memory once per node and build the group collectives go
    through: shared memory within the node then gloo between node leaders
    (``hierarchical``), else torch.distributed over every rank."""
    topology = node.topology
    memory = NodeMemory(node.leader_pid, node.is_leader, node.leader_token)

    def place(write: bool):
        job.bundle.place_in_(memory.allocate, write)
        if not hierarchical:
            return None
        numel = job.strategy.needs(job.model, job.bundle, job.plan).comm_numel
        return shm_group_state(job.config, numel, job.model, len(node.neighbours),
                               oversubscribed=False, allocate=memory.allocate,
                               initialize=write)

    try:
        state = place(True) if node.is_leader else None
        dist.barrier()           # the leader's buffers exist and hold the data
        if not node.is_leader:
            state = place(False)
        dist.barrier()           # every rank maps them: their names can go
    finally:
        memory.unlink_all()
    if not hierarchical:
        return TorchDistGroup()
    # Every rank creates every subgroup, in the same order (torch.distributed's rule).
    leaders = dist.new_group(topology.leaders) if len(topology.nodes) > 1 else None
    local = state.attach(topology.local_rank(world.rank))
    return HierarchicalGroup(world.rank, topology, local, leaders if node.is_leader else None)


def start_from_rank0(model, group) -> None:
    """Every rank starts from rank 0's parameters and buffers: a user's model built without
    a seed differs per process, and a resumed rank 0 holds the checkpoint's."""
    tensors = [t.data for t in model.parameters()] + \
        [b for b in model.buffers() if b.is_floating_point()]
    if tensors:
        group.broadcast_(tensors, src=0)


def gather_to_rank0(item, world) -> list | None:
    """Every rank's ``item`` at rank 0 (in rank order), None elsewhere: only rank 0 writes,
    so only rank 0 receives the reports and checkpoint parts."""
    gathered = [None] * world.world_size if world.rank == 0 else None
    dist.gather_object(item, gathered, dst=0)
    return gathered


def elastic_resume(out: str | Path | None, config, world, attempt: int) -> Checkpoint | None:
    """After torchrun restarted the group, the checkpoint this job last wrote, from
    whichever rank can read it (no shared file system needed: ``--out`` on rank 0's old
    node), sent to every rank; None on a first attempt or when there is none.

    Whether this is a restart is decided together: TORCHELASTIC_RESTART_COUNT counts only
    the failures of a rank's own node, so the ranks of the other nodes may say 0.
    """
    if out is None:
        return None
    found = _own_checkpoint(Path(out), config)
    said: list = [None] * world.world_size
    dist.all_gather_object(said, (restart_count(), attempt,
                                  found.epoch if found is not None else -1))
    if not any(restarts > 0 or joined > 1 for restarts, joined, _ in said):
        return None
    epochs = [epoch for _, _, epoch in said]
    best = max(epochs)
    if best < 0:
        return None
    source = epochs.index(best)
    holder = [found if world.rank == source else None]
    dist.broadcast_object_list(holder, src=source)
    return holder[0]


def _own_checkpoint(out: Path, config) -> Checkpoint | None:
    """The checkpoint in ``out`` if this job (same torchrun run id, same settings) wrote
    it; an unreadable or foreign one is not this job's."""
    if not (out / "checkpoint.pt").is_file():
        return None
    try:
        checkpoint = load(out)
    except UserError:
        return None
    if checkpoint.run.get(RUN_ID_KEY) != run_id() or checkpoint.config != config.as_dict():
        return None
    return checkpoint


def is_collective_failure(err: BaseException) -> bool:
    """Whether ``err`` came out of a collective (a peer gone or too late), not out of the
    user's model: gloo reports a closed connection as a plain RuntimeError, so the place it
    was raised tells."""
    if isinstance(err, (dist.DistError, CollectiveTimeout)):
        return True
    frames = traceback.extract_tb(err.__traceback__)
    marker = f"{os.sep}torch{os.sep}distributed{os.sep}"
    return bool(frames) and marker in frames[-1].filename


def lost_peers(world, node: Node | None) -> str:
    """Which ranks stopped answering, after a collective failed: the survivors check in at
    the job's store and, after a few seconds, the ranks that did not are named."""
    try:
        store = dist.distributed_c10d._get_default_store()
        prefix = "mptrain/roll-call/"   # the store is this attempt's (see join)
        # Ranks of this node that are alive answer too: they may be waiting for this one
        # in the node's shared memory, where they cannot see that a peer elsewhere is gone.
        here = [r for r in node.neighbours if psutil.pid_exists(node.pids[r])] if node else []
        # A store whose host vanished without closing its connection must not hold the
        # roll call for --worker-timeout.
        store.set_timeout(datetime.timedelta(seconds=_ROLL_CALL_S))
        answering = {world.rank, *here}
        for rank in answering:
            store.set(f"{prefix}{rank}", "here")
        arrivals = store.add(f"{prefix}arrivals", len(answering))
        keys = [f"{prefix}{r}" for r in range(world.world_size)]
        # Polled from Python, not store.wait: torchrun stops the survivors with SIGTERM
        # when it restarts the job, and a signal handler runs only between bytecodes --
        # inside store.wait the rank would sit out the whole roll call first.
        started = last_arrival = time.monotonic()
        while not store.check(keys):
            now = time.monotonic()
            if now - started > _ROLL_CALL_S or now - last_arrival > _ROLL_CALL_QUIET_S:
                break
            time.sleep(0.05)
            now_arrived = store.add(f"{prefix}arrivals", 0)
            if now_arrived != arrivals:
                arrivals, last_arrival = now_arrived, time.monotonic()
        else:
            return "every rank is still there"
        missing = [r for r, key in enumerate(keys) if not store.check([key])]
    except Exception:  # noqa: BLE001 -- the store itself is gone with its node
        return (f"the job's store at {os.environ.get('MASTER_ADDR', '?')}:"
                f"{os.environ.get('MASTER_PORT', '?')} is gone (its node stopped)")
    if node is None:
        return f"lost rank(s) {', '.join(map(str, missing))}"
    nodes = sorted({node.topology.node_index(r) for r in missing})
    return (f"lost rank(s) {', '.join(map(str, missing))} on node(s) "
            f"{', '.join(map(str, nodes))}")
