"""Central differential privacy for federated averaging (DP-FedAvg, McMahan et al. 2018).

Each client's update is clipped to L2 norm ``C`` (on the client, before it reports); the
server sums the clipped updates of the reporting clients, adds Gaussian noise of standard
deviation ``z * C`` to the sum and divides by the *expected* number of clients ``q * N``
(a fixed denominator: the count of reporting clients is never released). One client then
moves the released mean by at most ``C / (q N)`` whatever it holds, which is what the
accountant (``accounting``) assumes, with Poisson sampling of rate ``q``.

Adaptive clipping (Andrew et al. 2021, "Differentially Private Learning with Adaptive
Clipping"): every client also reports whether its update was within the clip; the server
releases that count with noise of std ``sigma_b`` and moves ``C`` geometrically towards the
``quantile`` of the update norms. Part of the privacy goes to that count, so the updates'
noise multiplier is ``(z^-2 - (2 sigma_b)^-2)^-1/2`` for a total of ``z``.

The noise here comes from seeded generators, block by block (so that every worker draws its
slice of the same vector): right for a simulation that must be reproducible, not for a
deployment, which needs a cryptographically secure source.
"""

from __future__ import annotations

import math

import torch

from .sampling import mix_seed

_NOISE, _COUNT_NOISE = 0x5EED_0006, 0x5EED_0007
#: Noise is drawn in blocks of this many numbers, each from its own seed: a worker draws
#: only the blocks its slice touches, and the vector is the same for any number of workers.
NOISE_BLOCK = 1 << 16


@torch.no_grad()
def clip_(update: torch.Tensor, clip: float) -> float:
    """Scale ``update`` in place to L2 norm at most ``clip``; returns its norm before."""
    norm = torch.linalg.vector_norm(update, dtype=torch.float64).item()
    if norm > clip:
        update.mul_(clip / norm)
    return norm


def noise_slice(numel: int, part: slice, std: float, seed: int,
                round_index: int) -> torch.Tensor:
    """The ``part`` of round ``round_index``'s Gaussian noise vector (``numel`` numbers of
    standard deviation ``std``), the same numbers whichever worker draws which part."""
    start, stop = part.start, part.stop
    out = torch.empty(max(0, stop - start))
    block = start // NOISE_BLOCK
    while block * NOISE_BLOCK < stop:
        begin = block * NOISE_BLOCK
        size = min(NOISE_BLOCK, numel - begin)
        generator = torch.Generator().manual_seed(mix_seed(seed, round_index, block, _NOISE))
        values = torch.randn(size, generator=generator)
        low, high = max(start, begin), min(stop, begin + size)
        out[low - start:high - start] = values[low - begin:high - begin]
        block += 1
    return out.mul_(std)


def private_mean(clipped_sum: torch.Tensor, noise: torch.Tensor,
                 expected_clients: float) -> torch.Tensor:
    """``(sum + noise) / (q N)``: the released mean update."""
    return clipped_sum.add(noise).div_(expected_clients)


def update_noise_multiplier(total: float, count_std: float | None) -> float:
    """The noise multiplier of the updates when a total of ``total`` is split with the
    clipped-count release of std ``count_std`` (Andrew et al. 2021, section 3.1); ``total``
    itself without adaptive clipping."""
    if count_std is None:
        return total
    rest = total ** -2 - (2 * count_std) ** -2
    if rest <= 0:
        raise ValueError(f"the clipped count's noise {count_std:g} must exceed half the "
                         f"noise multiplier {total:g}")
    return rest ** -0.5


def count_noise(count_std: float, seed: int, round_index: int) -> float:
    """Round ``round_index``'s noise on the count of clients within the clip."""
    generator = torch.Generator().manual_seed(mix_seed(seed, round_index, _COUNT_NOISE))
    return count_std * torch.randn((), generator=generator, dtype=torch.float64).item()


def next_clip(clip: float, within: float, expected_clients: float, quantile: float,
              lr: float, noise: float = 0.0) -> float:
    """Geometric update of the clip: ``C * exp(-lr * (b - quantile))`` where ``b`` is the
    noisy fraction of clients whose update was within ``C``."""
    fraction = (within + noise) / expected_clients
    return clip * math.exp(-lr * (fraction - quantile))
