"""The figures of a bench table, computed from the runs (pure functions)."""

from __future__ import annotations

import statistics


def spread(values) -> dict:
    """Median with min and max; ``None`` entries (failed or absent figures) are ignored."""
    present = [v for v in values if v is not None]
    if not present:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": statistics.median(present), "min": min(present), "max": max(present),
            "n": len(present)}


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


def time_to_accuracy(epochs: list[dict], target: float, run_start_offset_s: float
                     ) -> float | None:
    """Seconds from process start until the test accuracy first reaches ``target``."""
    for row in epochs:
        accuracy = row.get("test_accuracy")
        if accuracy is not None and accuracy >= target and row.get("elapsed_s") is not None:
            return run_start_offset_s + row["elapsed_s"]
    return None
