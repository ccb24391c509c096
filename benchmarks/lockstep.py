"""Does meeting a peer every step make a rank's next steps compute slower? (issue 24)

    python benchmarks/lockstep.py --rounds 12

Two forked processes, one thread each, train the MNIST CNN (channels-last, Adam, batch 64)
on batches gathered each step from a 60,000-image tensor both share, as mptrain's ranks do,
without mptrain: free-running, meeting after every step at a spin barrier (a shared
counter), or at a sleeping one (``multiprocessing.Barrier``). Only forward, backward and
the optimizer step are timed -- never the meeting -- so a ratio above 1 is compute that
got slower because of how the ranks met. The modes alternate within each round (the
host's drift moves them alike) and the table gives the paired ratios against free-running.
Nothing here asserts anything about time.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.multiprocessing as mp
import torch.nn.functional as F

from mptrain.models.nets import MnistCNN

MODES = ("free", "spin", "sleep")


def train(rank, mode, steps, warmup, data, targets, counter, barrier, out) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(rank)
    model = MnistCNN().to(memory_format=torch.channels_last)
    optimizer = torch.optim.Adam(model.parameters(), 1e-3)
    generator = torch.Generator().manual_seed(rank)
    seconds, generation = [], 0
    for step in range(warmup + steps):
        index = torch.randint(len(data), (64,), generator=generator)
        inputs = data[index].contiguous(memory_format=torch.channels_last)
        started = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        F.nll_loss(model(inputs), targets[index]).backward()
        optimizer.step()
        if step >= warmup:
            seconds.append(time.perf_counter() - started)
        if mode == "spin":
            generation += 2
            with counter.get_lock():
                counter.value += 1
            while counter.value < generation:
                pass
        elif mode == "sleep":
            barrier.wait()
    out[rank] = statistics.mean(seconds)


def one_run(context, mode, args, data, targets) -> float:
    """Milliseconds per step of compute, the mean of the two ranks."""
    counter, barrier, out = context.Value("q", 0), context.Barrier(2), context.Array("d", 2)
    ranks = [context.Process(target=train, args=(rank, mode, args.steps, args.warmup, data,
                                                 targets, counter, barrier, out))
             for rank in range(2)]
    for process in ranks:
        process.start()
    for process in ranks:
        process.join()
    return sum(out) / 2 * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(1)
    data, targets = torch.randn(60_000, 1, 28, 28), torch.randint(0, 10, (60_000,))
    context = mp.get_context("fork")
    results = {mode: [] for mode in MODES}
    for round_ in range(args.rounds):
        for mode in (MODES if round_ % 2 == 0 else MODES[::-1]):
            results[mode].append(one_run(context, mode, args, data, targets))
        print(f"round {round_ + 1}: " + ", ".join(f"{mode} {results[mode][-1]:.2f} ms"
                                                  for mode in MODES), flush=True)
    for mode in MODES[1:]:
        ratios = sorted(a / b for a, b in zip(results[mode], results["free"]))
        print(f"{mode} / free, compute per step: median {statistics.median(ratios):.3f} "
              f"({ratios[0]:.3f}-{ratios[-1]:.3f}), above 1 in {sum(r > 1 for r in ratios)} "
              f"of {len(ratios)}")


if __name__ == "__main__":
    main()
