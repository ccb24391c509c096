"""How much GPU memory the ranks' tensors hold: what tells a user how many workers one GPU
takes (and how large a cohort of stacked clients fits), reported for every round -- each
round's own peak, so that a round that needs more than the others shows as that round --,
the fullest GPU's largest kept in summary.json."""

from __future__ import annotations

import torch

#: The metrics column and summary.json key: the most memory the tensors of the ranks on one
#: GPU held together (the fullest GPU's); absent on CPU.
GPU_PEAK = "gpu_peak_bytes"
#: A rank's report extra: which GPU its peak was on.
_GPU_INDEX = "gpu_index"


def _index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def start_round_peak(device: torch.device) -> None:
    """Start this round's peak at what the rank's tensors hold now (torch keeps one peak
    since the process began: without this every round would report the run's)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(_index(device))


def device_memory(device: torch.device) -> dict:
    """The most memory this rank's tensors have held on ``device`` since the round began
    (torch's caching allocator; each process's CUDA context comes on top), as a report's
    extras."""
    if device.type != "cuda":
        return {}
    index = _index(device)
    return {GPU_PEAK: int(torch.cuda.max_memory_allocated(index)), _GPU_INDEX: index}


def fullest_gpu(extras: list[dict]) -> int | None:
    """From every rank's report extras: the largest sum of the peaks of the ranks that share
    a GPU (what had to fit on it), None without any GPU. The peaks are each rank's own, not
    simultaneous: the sum is an upper bound."""
    per_gpu: dict = {}
    for rank_extras in extras:
        if GPU_PEAK in rank_extras:
            index = rank_extras.get(_GPU_INDEX)
            per_gpu[index] = per_gpu.get(index, 0) + rank_extras[GPU_PEAK]
    return max(per_gpu.values()) if per_gpu else None
