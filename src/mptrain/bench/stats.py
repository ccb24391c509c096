"""The figures of a bench table, computed from the runs (pure functions)."""

from __future__ import annotations

import statistics
from typing import Callable

# A paired ratio whose min-max spans more than this fraction of its median is marked as too
# wide to trust. The ratios compare runs seconds apart, so they cancel the slow drift of a
# machine; what is left is noise between neighbouring runs. When that noise spans 20% of the
# figure, its median can sit 10% off either way, the size of the differences a bench is asked
# to tell apart (efficiency 0.9 against 1.0).
UNSTEADY_SPREAD = 0.2

# CPU time the hypervisor gave other guests (``steal`` in /proc/stat), as a fraction of the
# bench's wall time over every CPU, above which the bench says so: 2% is already the size of
# the effects a bench measures between neighbouring runs, and it does not fall evenly on them.
STEAL_NOTE_FRACTION = 0.02


def spread(values) -> dict:
    """Median with min and max; ``None`` entries (failed or absent figures) are ignored."""
    present = [v for v in values if v is not None]
    if not present:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": statistics.median(present), "min": min(present), "max": max(present),
            "n": len(present)}


def compute_seconds_per_sample(epochs: list[dict], workers: int) -> float | None:
    """A rank's compute seconds (forward, backward, optimizer: no waiting, no data) per
    sample it trained, over a run's epochs; None for runs that do not time their steps."""
    seconds = [e.get("time_compute") for e in epochs]
    samples = sum(e.get("train_samples") or 0 for e in epochs)
    if not epochs or any(s is None for s in seconds) or not samples:
        return None
    return sum(seconds) / (samples / max(1, workers))


def efficiency(samples_per_s: float | None, workers: int,
               single_thread_samples_per_s: float | None) -> float | None:
    """samples/s over what ``workers`` perfectly independent single-thread processes make."""
    if not samples_per_s or not single_thread_samples_per_s:
        return None
    return samples_per_s / (workers * single_thread_samples_per_s)


def speedup(samples_per_s: float | None, baseline: float | None) -> float | None:
    if not samples_per_s or not baseline:
        return None
    return samples_per_s / baseline


def paired_ratios(values: dict[int, float | None], baselines: dict[int, float | None],
           ratio: Callable[[float, float], float | None]) -> dict:
    """``ratio(value, baseline)`` of each repeat against the baseline run of the same repeat,
    summarised as ``spread`` plus ``unsteady``.

    Repeats are interleaved (A B C A B C), so run k of a cell and run k of its baseline ran
    seconds apart: the median of these ratios follows the machine's drift far less than the
    ratio of two medians, where one slow stretch of the baseline moves every figure. Repeats
    where either run failed are left out.
    """
    ratios = [ratio(value, baselines[repeat]) for repeat, value in sorted(values.items())
              if value is not None and baselines.get(repeat) is not None]
    stats = spread(ratios)
    stats["unsteady"] = is_unsteady(stats)
    return stats


def is_unsteady(stats: dict, limit: float = UNSTEADY_SPREAD) -> bool:
    """True when at least two ratios span more than ``limit`` of their median (one ratio has
    no spread to judge, so it is never marked)."""
    if stats["n"] < 2 or not stats["median"]:
        return False
    return (stats["max"] - stats["min"]) > limit * abs(stats["median"])


def time_to_accuracy(epochs: list[dict], target: float, run_start_offset_s: float
                     ) -> float | None:
    """Seconds from process start until the test accuracy first reaches ``target``."""
    for row in epochs:
        accuracy = row.get("test_accuracy")
        if accuracy is not None and accuracy >= target and row.get("elapsed_s") is not None:
            return run_start_offset_s + row["elapsed_s"]
    return None


def worth_noting_steal(steal_s: float | None, wall_s: float, cpus: int) -> bool:
    """Whether the hypervisor took enough CPU during a bench to say so next to its figures."""
    return bool(steal_s) and wall_s > 0 and steal_s / (wall_s * max(1, cpus)) \
        >= STEAL_NOTE_FRACTION
