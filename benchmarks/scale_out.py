"""torchrun scale-out on one machine, two torchrun agents on loopback as two nodes of 2 ranks:

1. ``allreduce``: hierarchical (shared memory within a node, gloo between the 2 node leaders)
   against a flat gloo all-reduce over all 4 ranks, for tensors shaped like the classic MNIST
   CNN's parameters and like a ~6M-parameter MLP: median milliseconds per all-reduce.
2. ``recovery``: rank 3 (node 1) exits at a training step; torchrun (--max-restarts 1)
   restarts both nodes and mptrain resumes from the last checkpoint by itself. Times from
   the crash to the last old rank's exit (detected and stopped), to the restarted ranks'
   start and to their first training step.
3. ``rejoin``: node 1's agent is SIGKILLed after the first checkpoint and a new agent is
   started for node 1 at once (as a supervisor would); node 0's agent restarts its ranks and
   the two nodes resume together. Times from the kill, as in 2. Both agents run with
   TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: torch 2.13's agents do not hand a node that joins
   after a restart the address of the store they share with their ranks. Once with
   torchrun's rendezvous heartbeat as it comes (a node is dead after 3 x 5 s), once at 1 s
   (``rejoin-keepalive-1s``: --rdzv-conf keep_alive_interval=1).

    python benchmarks/scale_out.py [--parts allreduce,recovery,rejoin,rejoin-keepalive-1s]
                                   [--repeats 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import result_path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = ROOT / "tests" / "launcher_workload.py"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def agent_command(port: int, program: list[str], launcher_args=()) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
            "--nproc-per-node", "2", "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"bench-{port}",
            *launcher_args, *program]


def start_agents(folder: Path, port: int, command: list[str],
                 env: dict) -> list[subprocess.Popen]:
    """Two agents running ``command`` (node 0 first: it hosts the store on ``port``)."""
    agents = [start_agent(folder, 0, command, env)]
    deadline = time.monotonic() + 60
    while not listening(port) and time.monotonic() < deadline:
        time.sleep(0.05)
    return agents + [start_agent(folder, 1, command, env)]


def start_agent(folder: Path, node: int, command: list[str], env: dict) -> subprocess.Popen:
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                "MASTER_PORT")} | env
    with open(folder / f"node{node}.log", "a") as log:   # the agent keeps its own copy
        return subprocess.Popen(command, cwd=folder, env=environment, stdout=log,
                                stderr=subprocess.STDOUT)


def two_agents(folder: Path, program: list[str], env: dict, launcher_args=()) -> list[int]:
    """Run ``program`` under two torchrun agents and wait for both."""
    port = free_port()
    command = agent_command(port, program, launcher_args)
    return [agent.wait(timeout=600) for agent in start_agents(folder, port, command, env)]


# -- 1. all-reduce ------------------------------------------------------------------------------

def rank_allreduce(out: str, iterations: int) -> None:
    """Runs in every rank: both groups, both tensor sets, rank 0 writes the timings."""
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    from mptrain.comm.dist import TorchDistGroup
    from mptrain.comm.hierarchical import HierarchicalGroup
    from mptrain.comm.shm import ShmGroupState
    from mptrain.launch import torchrun as launcher
    from mptrain.launch.node_memory import NodeMemory
    from mptrain.launch.world import detect_external_world
    from mptrain.models.nets import MnistCNN

    torch.set_num_threads(1)
    world = detect_external_world()
    launcher.join(world, "gloo", 120)
    node = launcher.discover(world)
    mlp = nn.Sequential(nn.Linear(784, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(),
                        nn.Linear(2048, 10))
    models = {"mnist-cnn": MnistCNN(), "mlp-6m": mlp}
    numel = max(sum(p.numel() for p in m.parameters()) for m in models.values())
    leader = node.is_leader
    memory = NodeMemory(node.leader_pid, leader)
    size = len(node.neighbours)
    state = ShmGroupState.create(size, numel, torch.float32, 120, False,
                                 allocate=memory.allocate) if leader else None
    dist.barrier()
    if not leader:
        state = ShmGroupState.create(size, numel, torch.float32, 120, False,
                                     allocate=memory.allocate, initialize=False)
    dist.barrier()
    memory.unlink_all()
    leaders = dist.new_group(node.topology.leaders)
    groups = {"hierarchical": HierarchicalGroup(world.rank, node.topology,
                                                state.attach(node.topology.local_rank(
                                                    world.rank)),
                                                leaders if leader else None),
              "flat-gloo": TorchDistGroup()}
    results = {}
    for model_name, model in models.items():
        tensors = [p.detach().clone() for p in model.parameters()]
        params = sum(t.numel() for t in tensors)
        for group_name, group in groups.items():
            for _ in range(5):
                group.average_(tensors)
            times = []
            for _ in range(iterations):
                dist.barrier()
                started = time.perf_counter()
                group.average_(tensors)
                times.append(time.perf_counter() - started)
            gathered = [None] * world.world_size
            dist.all_gather_object(gathered, statistics.median(times))
            results[f"{model_name}/{group_name}"] = {
                "parameters": params, "median_ms_slowest_rank": max(gathered) * 1e3}
    if world.rank == 0:
        Path(out).write_text(json.dumps(results))
    dist.barrier()


def bench_allreduce(iterations: int) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "allreduce.json"
        codes = two_agents(Path(folder), [__file__, "--rank-allreduce", str(out),
                                          "--iterations", str(iterations)], {})
        if codes != [0, 0]:
            raise SystemExit(f"all-reduce run failed: {codes}\n"
                             + (Path(folder) / "node0.log").read_text()[-3000:])
        return json.loads(out.read_text())


# -- 2. recovery --------------------------------------------------------------------------------

RECOVERY_PROGRAM = ["-m", "mptrain", "run", "--data", "launcher_workload:make_data",
                    "--model", "launcher_workload:make_model", "--batch-size", "32",
                    "--strategy", "sync", "--quiet", "--out", "out"]


def recovery_times(marks: Path, since: float) -> dict:
    """From the event at ``since``: the last rank of the old group gone, the restarted
    ranks' start (the workload imported) and their first training step."""
    def at(pattern: str) -> list[float]:
        return [float(p.read_text()) for p in marks.glob(pattern)]

    # Node 0 may be restarted with TORCHELASTIC_RESTART_COUNT 0 (torchrun counts only a
    # node's own failures): the restarted ranks are those that started after the event.
    imported = [t for t in at("imported-*") if t > since]
    exits = [t for t in at("exit-*") if since < t < min(imported)]
    return {"stopped_s": max(exits) - since if exits else None,
            "restarted_s": max(imported) - since,
            "first_step_s": max(t for t in at("first-step-*") if t > since) - since}


def bench_recovery() -> dict:
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        shutil.copy(WORKLOAD, folder / WORKLOAD.name)
        marks = folder / "marks"
        marks.mkdir()
        codes = two_agents(folder, RECOVERY_PROGRAM + ["--epochs", "4"],
                           {"CRASH_RANK": "3", "CRASH_STEP": "20", "MARK_DIR": str(marks)},
                           ("--max-restarts", "1"))
        if codes != [0, 0]:
            raise SystemExit(f"recovery run failed: {codes}\n"
                             + (folder / "node0.log").read_text()[-3000:])
        return recovery_times(marks, float((marks / "crash").read_text()))


def bench_rejoin(keep_alive: int | None = None) -> dict:
    """``keep_alive``: torchrun's rendezvous heartbeat in seconds (--rdzv-conf
    keep_alive_interval; a node is declared dead after 3 missed beats, 5 s each by
    default): the new node joins only once the killed one is declared dead."""
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        shutil.copy(WORKLOAD, folder / WORKLOAD.name)
        marks = folder / "marks"
        marks.mkdir()
        env = {"STEP_DELAY": "0.05", "MARK_DIR": str(marks),
               "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
        port = free_port()
        launcher_args = ["--max-restarts", "1"]
        if keep_alive is not None:
            launcher_args += ["--rdzv-conf",
                              f"keep_alive_interval={keep_alive},keep_alive_max_attempt=3"]
        command = agent_command(port, RECOVERY_PROGRAM + ["--epochs", "8"], launcher_args)
        agents = start_agents(folder, port, command, env)
        try:
            deadline = time.monotonic() + 300
            while not (folder / "out" / "checkpoint.pt").exists():
                if time.monotonic() > deadline or agents[0].poll() is not None:
                    raise SystemExit("rejoin run: no checkpoint\n"
                                     + (folder / "node0.log").read_text()[-3000:])
                time.sleep(0.02)
            killed = time.time()
            agents[1].kill()
            agents[1].wait()
            agents[1] = start_agent(folder, 1, command, env)
            codes = [agent.wait(timeout=600) for agent in agents]
        finally:
            for agent in agents:
                if agent.poll() is None:
                    agent.kill()
                    agent.wait()
        if codes != [0, 0]:
            raise SystemExit(f"rejoin run failed: {codes}\n"
                             + (folder / "node0.log").read_text()[-3000:])
        return recovery_times(marks, killed)


def summarise(name: str, runs: list[dict]) -> dict:
    median = {key: statistics.median(r[key] for r in runs if r[key] is not None)
              for key in ("stopped_s", "restarted_s", "first_step_s")
              if any(r[key] is not None for r in runs)}
    print(f"{name} (median of {len(runs)}): old ranks gone "
          f"{median.get('stopped_s', float('nan')):.1f} s, restarted ranks start "
          f"{median['restarted_s']:.1f} s, first step after resume "
          f"{median['first_step_s']:.1f} s (target <= 10 s)")
    return median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="allreduce,recovery,rejoin,rejoin-keepalive-1s")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--json", help="write the figures here (auto: "
                        "benchmarks/results/scale-out-DATE.json)")
    parser.add_argument("--rank-allreduce", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.json = result_path("scale-out", args.json)
    if args.rank_allreduce:
        rank_allreduce(args.rank_allreduce, args.iterations)
        return
    import torch

    parts = args.parts.split(",")
    result = {"torch": torch.__version__, "cores": os.cpu_count()}
    if "allreduce" in parts:
        runs = [bench_allreduce(args.iterations) for _ in range(args.repeats)]
        allreduce = {key: {"parameters": runs[0][key]["parameters"],
                           "median_ms": statistics.median(r[key]["median_ms_slowest_rank"]
                                                          for r in runs)}
                     for key in runs[0]}
        for model in ("mnist-cnn", "mlp-6m"):
            flat = allreduce[f"{model}/flat-gloo"]["median_ms"]
            hier = allreduce[f"{model}/hierarchical"]["median_ms"]
            print(f"all-reduce {model} "
                  f"({allreduce[f'{model}/flat-gloo']['parameters']:,} params): "
                  f"flat gloo {flat:.2f} ms, hierarchical {hier:.2f} ms, speed-up "
                  f"{flat / hier:.2f}x")
        result |= {"allreduce": allreduce, "allreduce_runs": runs}
    for part, bench in (("recovery", bench_recovery), ("rejoin", bench_rejoin),
                        ("rejoin-keepalive-1s", lambda: bench_rejoin(keep_alive=1))):
        if part in parts:
            runs = [bench() for _ in range(args.repeats)]
            result |= {part: runs, f"{part}_median": summarise(part, runs)}
    print(json.dumps(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
