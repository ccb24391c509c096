"""``--vectorize-clients auto|on|off``: which path trains a run's clients, and the line
that says so.

``auto`` decides by a rule, before anything starts, from the model and the run's shape --
not by timing, so that the same command always trains on the same path and a run stays
bitwise reproducible. Stacked clients pay a fixed cost per step (``vmap``'s and
``functional_call``'s Python work, a few milliseconds on a CPU) and win by turning many
small kernels into few large ones. The rule, from issue 39's figures (2-core CPU: the
McMahan 2NN 1.7x faster stacked with 10 clients, 3.3x with 50; the McMahan CNN 0.8x with 50
clients of 50 samples; an H200: 3.6-20x for both) and this machine's (a loaded 2-core CPU,
indicative: 2NN stacked 0.33x of one at a time with 1 client, 0.83x with 4, 0.91x with 8,
1.25x with 16; the digits CNN 0.77x with 6):

- on a GPU, vectorize when a worker's share of a round holds at least ``MIN_COHORT_GPU``
  clients (launches dominate a small model's step there);
- on a CPU, vectorize models without convolutions (a stacked convolution is a grouped one,
  slower on CPUs than one client's ordinary convolution) when a worker's share holds at
  least ``MIN_COHORT_CPU`` clients.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn as nn

from ...errors import setting_name

MIN_COHORT_CPU = 10
MIN_COHORT_GPU = 2


def vectorizing(mode: str) -> str:
    """``--vectorize-clients on`` as the caller spells the setting (``vectorize_clients on``
    from ``fit()``): what the reasons and refusals tell the user to use."""
    return f"{setting_name('vectorize_clients')} {mode}"


@dataclass(frozen=True)
class ClientPath:
    """The path a run's clients train on: stacked in cohorts of ``cohort_size`` clients (None
    while a worker has yet to size it from its GPU's free memory), or one at a time and
    why.

    ``expected``: Poisson sampling's expected clients a round (None when every round
    samples the same count). A Poisson cohort is sized for the most a round can sample,
    several times what a round usually holds, so its size alone would overstate the
    cohorts that train."""

    vectorized: bool
    cohort_size: int | None = None
    reason: str = ""
    expected: int | None = None

    def describe(self) -> str:
        """``vectorized x50``, ``vectorized, cohorts of up to 55 (Poisson: 12 clients
        expected per round)`` or ``one client at a time: <reason>``, for the banner and
        the summary."""
        if self.vectorized:
            if not self.cohort_size:
                return "vectorized"
            if self.expected is None:
                return f"vectorized x{self.cohort_size}"
            return (f"vectorized, cohorts of up to {self.cohort_size} (Poisson: {self.expected} "
                    "clients expected per round)")
        return f"one client at a time: {self.reason}" if self.reason \
            else "one client at a time"

    def sized(self, cohort_size: int) -> "ClientPath":
        return replace(self, vectorized=True, cohort_size=cohort_size)


def first_convolution(model: nn.Module) -> str | None:
    """The name of the model's first convolution (None without one)."""
    for name, module in model.named_modules():
        if isinstance(module, nn.modules.conv._ConvNd):
            return name or "the model"
    return None


def auto_path(model: nn.Module, device: str, clients_per_round: float,
              workers: int) -> ClientPath:
    """``auto``'s rule (module doc) for a model that can vectorize; ``clients_per_round``
    may be Poisson's expected count."""
    share = math.floor(clients_per_round / max(1, workers))
    if device == "cuda":
        if share >= MIN_COHORT_GPU:
            return ClientPath(True)
        return ClientPath(False, reason=f"{share} client(s) per worker per round "
                                        f"(auto stacks {MIN_COHORT_GPU} or more on a GPU)")
    convolution = first_convolution(model)
    if convolution is not None:
        return ClientPath(False, reason=f"convolutions ({convolution}) stack as grouped "
                                        "convolutions, slower on a CPU than one client at a "
                                        f"time ({vectorizing('on')} to try)")
    if share < MIN_COHORT_CPU:
        return ClientPath(False, reason=f"{share} client(s) per worker per round (auto "
                                        f"stacks {MIN_COHORT_CPU} or more on a CPU; "
                                        f"{vectorizing('on')} to try)")
    return ClientPath(True)


def as_tensor(cohort_size: int) -> torch.Tensor:
    """A cohort size for a broadcast from rank 0 (exact in float32 below 2**24)."""
    return torch.tensor([float(cohort_size)])
