"""How much GPU memory a rank's tensors hold: what tells a user how many workers one GPU
takes, reported with every round and the fullest rank's kept in summary.json."""

from __future__ import annotations

import torch

#: The metrics column and summary.json key; absent on CPU.
GPU_PEAK = "gpu_peak_bytes"


def device_memory(device: torch.device) -> dict:
    """The most memory this rank's tensors have held on ``device`` so far (torch's caching
    allocator; the CUDA context comes on top), as a report's extras."""
    if device.type != "cuda":
        return {}
    return {GPU_PEAK: int(torch.cuda.max_memory_allocated(device))}
