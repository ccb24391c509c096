"""In-process measurements for ``comm_bound.py``: what one step's gradient average costs a
rank, through mptrain's shared-memory group and through gloo, against the physical floor.

A run's own step profile (``engine.profile``) gives the collectives' share of its steps, but
not per collective against the copy floor, so each figure here comes from 2 forked
processes (one thread each, as in the runs) that do only that step's communication,
``rounds`` times:

- ``shm``: ``ShmGroup.average_`` of gradients shaped like the model's parameters, then
  ``broadcast_`` of its buffers from rank 0 -- exactly what ``SharedMemoryDDP`` does after
  backward and after the step (``strategies/ddp.py``). For a conv net, once with contiguous
  gradients and once channels-last, the layout mptrain's replicas train in.
- ``gloo``: what torch's DDP does per step over gloo, without the overlap with backward:
  gradients copied into DDP's buckets (1 MiB first, then 25 MiB, parameters in reverse
  order), each bucket all-reduced over loopback TCP and divided by the world size, copied
  back.
- ``memcpy``: ``dst.copy_(src)`` of a large float32 buffer, in 1 process and in 2 processes
  at once (the ranks of a step copy at the same time and share the memory bus).
- ``compute``: forward, loss and backward of one batch without any collective, both ranks at
  once: the part of a step the collective is weighed against.

A round's figure is the slowest rank's (a collective ends for the step when the last rank
leaves it); each cell reports the median over rounds. Nothing here asserts anything.
"""

from __future__ import annotations

import socket
import statistics
import time

import torch
import torch.nn.functional as F

import comm_workloads
from mptrain.comm.shm import ShmGroupState
from mptrain.launch.supervisor import Supervisor

FIRST_BUCKET_BYTES = 1 << 20      # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
BUCKET_BYTES = 25 << 20           # DDP's default bucket_cap_mb


def _run_ranks(target, args_per_rank) -> list:
    """Run ``target`` in forked processes; each sends one list of per-round seconds (or a
    dict of such lists). Returns what every rank sent, by rank."""
    sent = {}
    result = Supervisor("fork", on_message=sent.__setitem__).run(target, args_per_rank)
    if not result.ok:
        raise RuntimeError("; ".join(f.describe() for f in result.failures))
    return [sent[rank] for rank in sorted(sent)]


def _slowest_median(per_rank: list[list[float]]) -> float:
    """The median over rounds of the slowest rank's seconds in each round."""
    return statistics.median(max(round_) for round_ in zip(*per_rank))


def _model_and_grads(model_name: str, channels_last: bool):
    torch.manual_seed(0)
    model = comm_workloads.MODELS[model_name]()
    if channels_last:
        model.to(memory_format=torch.channels_last)
    # Gradients take their parameter's layout (AccumulateGrad), as in a real step.
    grads = [torch.randn_like(p) for p in model.parameters()]
    return model, grads


# -- memcpy --------------------------------------------------------------------------------

def _memcpy_rank(rank, channel, state, numel, rounds):
    torch.set_num_threads(1)
    group = state.attach(rank)
    src, dst = torch.randn(numel), torch.empty(numel)
    dst.copy_(src)   # touch every page first
    seconds = []
    for _ in range(rounds):
        group.barrier()   # the ranks copy at the same time, as in a step
        started = time.perf_counter()
        dst.copy_(src)
        seconds.append(time.perf_counter() - started)
    channel.send(seconds)


def memcpy_bandwidth(numel: int, rounds: int, processes: int) -> float:
    """Bytes per second one process copies (``copy_``: each byte read once, written once)
    while ``processes`` processes copy at once; the median over rounds of the slowest."""
    state = ShmGroupState.create(processes, 1, torch.float32, 60.0, oversubscribed=False)
    per_rank = _run_ranks(_memcpy_rank, [(state, numel, rounds)] * processes)
    return numel * 4 / _slowest_median(per_rank)


# -- the shared-memory group ----------------------------------------------------------------

def _shm_rank(rank, channel, state, model_name, channels_last, warmup, rounds,
              compute_batch, compute_rounds):
    torch.set_num_threads(1)
    group = state.attach(rank)
    model, grads = _model_and_grads(model_name, channels_last)
    buffers = list(model.buffers())
    seconds = []
    for round_ in range(warmup + rounds):
        group.barrier()
        started = time.perf_counter()
        group.average_(grads)
        if buffers:
            group.broadcast_(buffers, src=0)
        if round_ >= warmup:
            seconds.append(time.perf_counter() - started)
    channel.send({"collective": seconds, "compute": _compute(group, model, channels_last,
                                                             compute_batch, compute_rounds)})


def _compute(group, model, channels_last, batch, rounds) -> list[float]:
    """Seconds of forward, loss and backward of one batch (no collective), after one
    untimed batch."""
    if rounds == 0:
        return []
    train, _ = comm_workloads.make_images(batch, 1)
    inputs, targets = train.tensors
    if channels_last:
        inputs = inputs.contiguous(memory_format=torch.channels_last)
    model.train()
    seconds = []
    for round_ in range(rounds + 1):
        group.barrier()
        started = time.perf_counter()
        model.zero_grad()
        F.cross_entropy(model(inputs), targets).backward()
        if round_ > 0:
            seconds.append(time.perf_counter() - started)
    return seconds


def shm_step_collective(model_name: str, channels_last: bool, warmup: int, rounds: int,
                        compute_batch: int, compute_rounds: int) -> dict:
    """Seconds of ``SharedMemoryDDP``'s per-step communication between 2 ranks, and of one
    batch's forward and backward in the same layout."""
    model, _ = _model_and_grads(model_name, False)
    numel = sum(t.numel() for t in list(model.parameters()) + list(model.buffers()))
    state = ShmGroupState.create(2, numel, torch.float32, 60.0, oversubscribed=False)
    per_rank = _run_ranks(_shm_rank, [(state, model_name, channels_last, warmup, rounds,
                                       compute_batch, compute_rounds)] * 2)
    compute = [r["compute"] for r in per_rank]
    return {"collective_s": _slowest_median([r["collective"] for r in per_rank]),
            "compute_s": _slowest_median(compute) if compute[0] else None}


# -- gloo, as torch's DDP uses it -----------------------------------------------------------

def ddp_buckets(grads: list[torch.Tensor]) -> list[list[int]]:
    """Indices of ``grads`` per bucket as DDP fills them: parameters in reverse order, a
    bucket closed once it holds the cap (1 MiB for the first, 25 MiB after)."""
    buckets, current, size = [], [], 0
    for index in reversed(range(len(grads))):
        current.append(index)
        size += grads[index].numel() * grads[index].element_size()
        if size >= (FIRST_BUCKET_BYTES if not buckets else BUCKET_BYTES):
            buckets.append(current)
            current, size = [], 0
    if current:
        buckets.append(current)
    return buckets


def _gloo_rank(rank, channel, port, model_name, warmup, rounds):
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    _, grads = _model_and_grads(model_name, False)
    buckets = [(indices, torch.empty(sum(grads[i].numel() for i in indices)))
               for indices in ddp_buckets(grads)]
    seconds = []
    for round_ in range(warmup + rounds):
        dist.barrier()
        started = time.perf_counter()
        for indices, flat in buckets:
            torch.cat([grads[i].reshape(-1) for i in indices], out=flat)
            dist.all_reduce(flat)
            flat.div_(2)
            offset = 0
            for i in indices:
                grads[i].copy_(flat[offset:offset + grads[i].numel()].view_as(grads[i]))
                offset += grads[i].numel()
        if round_ >= warmup:
            seconds.append(time.perf_counter() - started)
    dist.destroy_process_group()
    channel.send(seconds)


def gloo_step_collective(model_name: str, warmup: int, rounds: int) -> float:
    """Seconds of one step's DDP-style bucketed gloo all-reduce between 2 ranks."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return _slowest_median(_run_ranks(_gloo_rank, [(port, model_name, warmup, rounds)] * 2))


# -- the floor --------------------------------------------------------------------------------

def shm_bytes_copied(model_name: str, world: int = 2) -> dict:
    """Bytes one rank copies per step in ``SharedMemoryDDP`` (read once and written once
    each, the unit memcpy bandwidth is measured in), from ``ShmGroup.average_`` and
    ``broadcast_``:

    - gradients into this rank's slot: P bytes;
    - its 1/world chunk of every slot summed into the result (``mean_of_rows``'s
      ``torch.sum``): reads P, writes P/world, counted as (P + P/world) / 2 bytes copied;
    - that chunk divided by the world size in place (its ``div_``): P/world bytes;
    - the result back into the gradients: P bytes;
    - buffers (BatchNorm statistics), rank 0 into the result, the others out of it: B bytes.
    """
    model, grads = _model_and_grads(model_name, False)
    p = sum(g.numel() * g.element_size() for g in grads)
    b = sum(t.numel() * t.element_size() for t in model.buffers())
    parts = {"gradients_in": p, "reduce": (p + p / world) / 2, "divide": p / world,
             "gradients_out": p, "buffers": b}
    return {"parameter_bytes": p, "buffer_bytes": b, "parts": parts,
            "total": sum(parts.values())}
