"""How much GPU memory the ranks' tensors hold: what tells a user how many workers one GPU
takes, reported with every round, the fullest GPU's kept in summary.json."""

from __future__ import annotations

import torch

#: The metrics column and summary.json key: the most memory the tensors of the ranks on one
#: GPU held together (the fullest GPU's); absent on CPU.
GPU_PEAK = "gpu_peak_bytes"
#: A rank's report extra: which GPU its peak was on.
_GPU_INDEX = "gpu_index"


def device_memory(device: torch.device) -> dict:
    """The most memory this rank's tensors have held on ``device`` so far (torch's caching
    allocator; each process's CUDA context comes on top), as a report's extras."""
    if device.type != "cuda":
        return {}
    index = device.index if device.index is not None else torch.cuda.current_device()
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
