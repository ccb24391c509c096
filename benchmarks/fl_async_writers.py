"""The FEMNIST-like half of ``fl_async.py``: a LEAF folder in FEMNIST's format
(``--data leaf:DIR``, one client per writer) made from MNIST's digits, because FEMNIST
itself cannot be downloaded where these figures are made and the repository has no learnable
FEMNIST-format data (``tests/leaf_files.py`` and ``leaf_load.py`` write random labels).

What it keeps of FEMNIST (LEAF, Caldas et al. 2018): natural clients of unequal size --
samples a writer drawn from a lognormal with FEMNIST's mean and spread (226.8 and 88.9
samples) -- each writer's own hand, here a fixed random slant, shear, size and stroke
thickness applied to all of that writer's digits, LEAF's own 90/10 train/test split of each
writer's samples, and FEMNIST's pixel convention (784 floats in [0, 1], white background).
What it does not: FEMNIST's 62 classes (these are its 10 digit classes, 0-9, which FEMNIST
numbers alike) and real writers' variety. The unequal sizes matter on the virtual clock: a
writer's update takes time in proportion to its samples, unlike ``shards:2``'s equal ones.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

#: FEMNIST's samples per writer (LEAF's paper, Table 1): mean and standard deviation.
FEMNIST_MEAN, FEMNIST_SD = 226.8, 88.9
SAID = ("FEMNIST-like writers made from MNIST digits (benchmarks/fl_async_writers.py: "
        "{writers} writers, FEMNIST's lognormal samples a writer, a slant, shear, size and "
        "stroke of each writer's own; 10 classes, not FEMNIST's 62)")


def writer_sizes(writers: int, rng: np.random.Generator) -> np.ndarray:
    """Samples of each writer: lognormal with FEMNIST's mean and standard deviation."""
    sigma = math.sqrt(math.log(1 + (FEMNIST_SD / FEMNIST_MEAN) ** 2))
    mu = math.log(FEMNIST_MEAN) - sigma ** 2 / 2
    return np.maximum(20, rng.lognormal(mu, sigma, writers).round()).astype(int)


def writer_sizes_and_train_counts(writers: int, seed: int = 0) -> tuple[list, list]:
    """Each writer's samples and its training share (LEAF's 90%), as the folder of
    ``write_writers(..., writers, seed)`` holds them, without writing it."""
    sizes = writer_sizes(writers, np.random.default_rng(seed))
    return sizes.tolist(), [math.ceil(0.9 * s) for s in sizes]


def in_hand(images: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
    """``images`` ([n, 28, 28] in [0, 1], ink bright) as one writer writes them: one slant,
    shear and size for all, and a thicker or thinner stroke."""
    angle, shear = math.radians(rng.normal(0, 12)), rng.normal(0, 0.25)
    scale = float(np.clip(rng.normal(1.0, 0.1), 0.75, 1.25))
    cos, sin = math.cos(angle) / scale, math.sin(angle) / scale
    theta = torch.tensor([[cos, -sin + shear, 0.0], [sin, cos, 0.0]], dtype=torch.float32)
    batch = images.unsqueeze(1)
    grid = F.affine_grid(theta.expand(len(images), 2, 3), list(batch.shape),
                         align_corners=False)
    written = F.grid_sample(batch, grid, align_corners=False)
    stroke = rng.choice(["thin", "plain", "thick"])
    if stroke == "thick":
        written = F.max_pool2d(written, 3, stride=1, padding=1) * 0.5 + written * 0.5
    elif stroke == "thin":
        written = -F.max_pool2d(-written, 2, stride=1, padding=(1, 1))[..., :28, :28] * 0.5 \
            + written * 0.5
    return written.squeeze(1).clamp(0, 1)


def write_writers(mnist_dir: str, root: Path, writers: int, seed: int = 0) -> str:
    """Write the folder (train/ and test/, one file each) under ``root``; returns what the
    output says it is."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from mptrain.data.idx import load_mnist

    images, labels, _, _ = load_mnist(mnist_dir)
    rng = np.random.default_rng(seed)
    sizes = writer_sizes(writers, rng)
    if sizes.sum() > len(images):
        raise SystemExit(f"{writers} writers need {sizes.sum():,} digits; MNIST has "
                         f"{len(images):,}")
    order = rng.permutation(len(images))
    splits = {"train": {}, "test": {}}
    start = 0
    for writer, size in enumerate(sizes):
        rows = order[start:start + size]
        start += size
        pixels = in_hand(torch.from_numpy(images[rows]).float() / 255, rng)
        x = (1 - pixels).reshape(size, 784).numpy().round(2)   # FEMNIST: white background
        y = labels[rows].tolist()
        train = math.ceil(0.9 * size)   # writer_sizes_and_train_counts' share
        uid = f"w{writer:04d}"
        splits["train"][uid] = {"x": x[:train].tolist(), "y": y[:train]}
        splits["test"][uid] = {"x": x[train:].tolist(), "y": y[train:]}
    for split, users in splits.items():
        folder = root / split
        folder.mkdir(parents=True, exist_ok=True)
        text = json.dumps({"users": list(users),
                           "num_samples": [len(u["y"]) for u in users.values()],
                           "user_data": users})
        (folder / f"all_data_0_{split}.json").write_text(text)
    return SAID.format(writers=writers)
