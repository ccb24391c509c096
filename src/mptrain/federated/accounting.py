"""The privacy spent, as Google's ``dp-accounting`` computes it (an optional extra:
``pip install "mptrain[privacy]"``); no accounting maths of our own.

Every round of DP-FedAvg is a Poisson-sampled Gaussian mechanism: clients join with
probability ``q`` and the sum of their clipped updates gets noise of ``z`` times the clip.
The accountant keeps the history of rounds as ``(q, z, rounds)`` runs -- plain numbers, the
state a checkpoint holds -- and composes them with the RDP accountant (Mironov 2017; the
default, fast) or the PLD accountant (privacy loss distributions, tighter, slower).
"""

from __future__ import annotations

import logging
import math
from contextlib import contextmanager
from functools import lru_cache

from ..errors import UserError
from ..errors import setting_name as named   # as the caller spelled the setting
from .choices import ACCOUNTANTS

INSTALL_HINT = 'pip install "mptrain[privacy]" (dp-accounting>=0.4)'


def require_dp_accounting():
    """The ``dp_accounting`` package, or a one-line refusal saying how to install it."""
    try:
        import dp_accounting
    except ImportError:
        raise UserError(f"differential privacy needs Google's dp-accounting: "
                        f"{INSTALL_HINT}") from None
    return dp_accounting


@contextmanager
def _quiet_absl():
    # dp-accounting's RDP maths warns through absl for every fractional order it cannot
    # evaluate (and then leaves it out, as it should): hundreds of lines per call.
    logger = logging.getLogger("absl")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


PLD_INTERVAL = 1e-4      # dp-accounting's PLDAccountant default


# What one round costs is the expensive part of every answer (the RDP of a subsampled Gaussian
# at 156 orders: ~0.13 s; its PLD: ~1.1 s), and it depends on (q, z) alone. Asked once per
# (q, z) here, it keeps rank 0's per-round accounting -- which every other rank waits for at
# the round's barrier -- in milliseconds instead of adding a tenth of a second to each round.
@lru_cache(maxsize=32)
def _rdp_of_one_round(q: float, z: float):
    """dp-accounting's RDP of one round at its default orders (read-only: it is shared)."""
    library = require_dp_accounting()
    accountant = library.rdp.RdpAccountant(library.rdp.rdp_privacy_accountant.DEFAULT_RDP_ORDERS)
    with _quiet_absl():
        accountant.compose(library.PoissonSampledDpEvent(q, library.GaussianDpEvent(z)))
    rdp = accountant.rdp
    rdp.setflags(write=False)
    return rdp


@lru_cache(maxsize=32)
def _pld_of_one_round(q: float, z: float):
    """dp-accounting's PLD of one round, built with the arguments its PLDAccountant passes."""
    library = require_dp_accounting()
    return library.pld.privacy_loss_distribution.from_gaussian_mechanism(
        standard_deviation=z, value_discretization_interval=PLD_INTERVAL, sampling_prob=q,
        neighboring_relation=library.NeighboringRelation.ADD_OR_REMOVE_ONE)


@lru_cache(maxsize=256)
def _epsilon(kind: str, history: tuple[tuple[float, float, int], ...], delta: float) -> float:
    """What dp-accounting's accountant answers for ``history``, composed the way it composes
    (RDP: the sum of each run's count times its per-order RDP, then its ``compute_epsilon``;
    PLD: each run's distribution self-composed, then composed in order; a run that samples
    nobody adds nothing, one without noise makes epsilon infinite), with each round's own
    figures asked of it once."""
    library = require_dp_accounting()
    if not history:
        return 0.0
    with _quiet_absl():
        if kind == "rdp":
            rdp = 0.0
            for q, z, rounds in history:
                rdp = rdp + rounds * _rdp_of_one_round(q, z)
            orders = library.rdp.rdp_privacy_accountant.DEFAULT_RDP_ORDERS
            return float(library.rdp.rdp_privacy_accountant.compute_epsilon(orders, rdp, delta)[0])
        if any(q > 0 and z == 0 for q, z, _ in history):
            return math.inf
        pld = library.pld.privacy_loss_distribution.identity(
            value_discretization_interval=PLD_INTERVAL)
        for q, z, rounds in history:
            if q > 0:
                pld = pld.compose(_pld_of_one_round(q, z).self_compose(rounds))
        return float(pld.get_epsilon_for_delta(delta))


class PrivacyAccountant:
    """The rounds spent so far and the epsilon they cost at a given delta."""

    def __init__(self, kind: str = "rdp"):
        if kind not in ACCOUNTANTS:
            raise UserError(f"unknown {named('accountant')} {kind!r}; choose one of: "
                            f"{', '.join(ACCOUNTANTS)}")
        self.kind = kind
        self.history: list[tuple[float, float, int]] = []

    def spend(self, rate: float, noise_multiplier: float, rounds: int = 1) -> None:
        """Record ``rounds`` rounds of sampling rate ``rate`` and noise ``noise_multiplier``."""
        if self.history and self.history[-1][:2] == (rate, noise_multiplier):
            q, z, n = self.history[-1]
            self.history[-1] = (q, z, n + rounds)
        else:
            self.history.append((rate, noise_multiplier, rounds))

    @property
    def rounds(self) -> int:
        return sum(n for _, _, n in self.history)

    def epsilon(self, delta: float) -> float:
        """The epsilon spent so far at ``delta``."""
        return _epsilon(self.kind, tuple(self.history), delta)

    def epsilon_after(self, rate: float, noise_multiplier: float, delta: float,
                      rounds: int = 1) -> float:
        """The epsilon that ``rounds`` more rounds would bring the total to."""
        ahead = PrivacyAccountant(self.kind)
        ahead.history = list(self.history)
        ahead.spend(rate, noise_multiplier, rounds)
        return ahead.epsilon(delta)

    def state_dict(self) -> dict:
        return {"kind": self.kind, "history": [list(run) for run in self.history]}

    def load_state_dict(self, state: dict) -> None:
        self.kind = state["kind"]
        self.history = [(float(q), float(z), int(n)) for q, z, n in state["history"]]
