"""``--vectorize-clients auto|on|off``: which path trains a run's clients, and the line
that says so.

``auto`` decides by a rule, before anything starts, from the model and the run's shape --
not by timing, so that the same command always trains on the same path and a run stays
bitwise reproducible. Stacked clients pay a fixed cost per step (``vmap``'s and
``functional_call``'s Python work, a few milliseconds on a CPU) and win by turning many
small kernels into few large ones. What decides is a worker's *share* of a round's clients
(clients a round / workers): ``--workers 2`` halves each worker's cohort as well as its
threads. The rule (``benchmarks/fl_vectorized.py`` measures it, ``--workers 1`` and ``2``):

- never models with recurrent layers: stacked, an LSTM runs step by step in small batched
  products (``stackable``), where one client runs one fused kernel a layer (oneDNN's,
  cuDNN's). On a CPU, LEAF's Shakespeare LSTM stacked 10 clients at ~0.3x (one gradient:
  2.5-2.7 s against 0.7-0.9 s; lightly loaded, indicative; ``fl_vectorized.py``'s
  lstm-shakespeare case measures a round); on a GPU its 80
  steps x 2 layers are thousands of launches a step, unmeasured: ``on`` to try;
- on a GPU, vectorize when a worker's share of a round holds at least ``MIN_COHORT_GPU``
  clients (launches dominate a small model's step there; issue 39: an H200 3.6-20x);
- on a CPU, never models with convolutions (a stacked convolution is a grouped one, slower
  on CPUs than one client's ordinary convolution: the McMahan CNN 0.8x); other models when
  a worker's share holds at least ``MIN_COHORT_CPU`` clients.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn as nn

from ...errors import setting_name

#: A CPU worker stacks its share of a round's clients from this many (the McMahan 2NN, B=10,
#: quiet 2-core CPU, on/off s a round): a share of 10 at one thread per worker 1.38-1.77x
#: (100 clients, 10 a round, --workers 1 --threads-per-worker 1), at two threads
#: 1.74-1.91x; a share of 5 at one thread 0.92x (--workers 2, 10 a round: 0.432 vs 0.398
#: s); a share of 25 (pfl's shape, 50 a round, --workers 2) 1.81x. A fixed cost per
#: stacked step plus a cost per client, fitted to the shares 5 and 10, breaks even near 6
#: clients. One thread per worker is the worst case for stacking (more threads split the
#: stacked products; a lone client's are too small to split), so a threshold that holds
#: there holds for more threads. Re-measure: benchmarks/fl_vectorized.py (its module doc).
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
    return _first_of(model, nn.modules.conv._ConvNd)


def first_recurrent(model: nn.Module) -> str | None:
    """The name of the model's first recurrent layer (LSTM, GRU, RNN; None without one)."""
    return _first_of(model, nn.RNNBase)


def _first_of(model: nn.Module, kind: type) -> str | None:
    for name, module in model.named_modules():
        if isinstance(module, kind):
            return name or "the model"
    return None


def auto_path(model: nn.Module, device: str, clients_per_round: float,
              workers: int) -> ClientPath:
    """``auto``'s rule (module doc) for a model that can vectorize; ``clients_per_round``
    may be Poisson's expected count."""
    share = math.floor(clients_per_round / max(1, workers))
    recurrent = first_recurrent(model)
    if recurrent is not None:
        return ClientPath(False, reason=f"recurrent layers ({recurrent}) stack as a loop of "
                                        "small batched steps, slower than one client's fused "
                                        f"kernel ({vectorizing('on')} to try)")
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
        per_worker = f" with {workers} workers" if workers > 1 else ""
        return ClientPath(False, reason=f"{share} client(s) per worker per round{per_worker} "
                                        f"(auto stacks {MIN_COHORT_CPU} or more on a CPU; "
                                        f"{vectorizing('on')} to try)")
    return ClientPath(True)


def as_tensor(cohort_size: int) -> torch.Tensor:
    """A cohort size for a broadcast from rank 0 (exact in float32 below 2**24)."""
    return torch.tensor([float(cohort_size)])
