"""fedavg's own section of the run's settings, :class:`FedAvgSettings` (``TrainConfig.fedavg``),
and what its settings stand for when left out (the privacy delta, the adaptive clip's step,
the count noise, the server optimizer). One place, so the parent, the workers and the
reports agree.

The section's fields are given by their flat names -- the flags', the config file's and
``fit()``'s, unchanged -- and ``TrainConfig`` files them here; each value is checked there
with every other setting (``config.check_setting``). Nothing here imports torch: the command
line reads these names before torch is imported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

DEFAULT_DP_DELTA = 1e-5
#: What a federated run has for --lr-schedule, said where the flag is refused: a client's
#: learning rate is one value a round (``clients.client_lr``), so cosine's anneal along an
#: epoch's steps has no steps to anneal along.
LR_PER_ROUND = ("{lr_decay} (a client's learning rate is constant within a round, "
                "multiplied by it every round)")
DEFAULT_CLIP_LR = 0.2


@dataclass(frozen=True)
class FedAvgSettings:
    """What a fedavg run is told beyond the common settings."""

    rounds: int = 20
    clients: int = 100
    clients_per_round: int | None = None    # None: from client_fraction
    client_fraction: float | None = None    # None with clients_per_round None: 10 clients
    local_epochs: int = 1
    partition: str = "iid"
    prox_mu: float = 0.0
    server_optimizer: str = "sgd"
    server_lr: float | None = None          # None: the server optimizer's default (sgd: 1)
    server_momentum: float = 0.0
    server_betas: tuple[float, float] | None = None   # adam/yogi/adagrad; None: 0.9, 0.99
    server_tau: float | None = None         # adaptivity of adam/yogi/adagrad; None: 1e-3
    accept_failures: bool = False
    scaffold: bool = False
    sampling: str = "fixed"                 # fixed-size uniform sample, or Poisson (rate q)
    dropout_rate: float = 0.0               # sampled clients that train but never report
    straggler_rate: float = 0.0             # sampled clients doing part of their local steps
    dp_clip: float | None = None            # L2 clip of each client's update
    dp_noise: float | None = None           # noise multiplier z: std z * clip on the sum
    dp_delta: float | None = None           # None with DP: 1e-5
    target_epsilon: float | None = None     # stop before the privacy spent would pass it
    accountant: str | None = None           # None with DP: rdp
    dp_clip_quantile: float | None = None   # adaptive clipping (Andrew et al. 2021)
    dp_clip_lr: float | None = None         # its geometric step; None: 0.2
    dp_count_noise: float | None = None     # std of the noise on the clipped count
    client_eval_every: int | None = None    # evaluate each client's own data every N rounds
    vectorize_clients: str = "auto"         # clients trained as stacked model copies: auto|on|off
    vectorize_chunk: int | None = None      # clients per stacked cohort; None: from memory
    aggregator: str = "mean"                # how the server combines the round's updates
    malicious_fraction: float = 0.0         # clients that attack (seeded, fixed for the run)
    attack: str | None = None               # what they send (federated.robust.attacks)
    drop_stragglers: bool = False           # FedAvg as FedProx's paper runs it: stragglers lost
    eval_train: bool = False                # with the test set, score the whole training set
    client_speeds: str | None = None        # the virtual clock's speeds (federated.clock)
    availability_trace: str | None = None   # when each client is online (FedScale's layout)
    round_deadline: float | None = None     # virtual seconds a round waits for its clients
    over_select: float = 1.0                # sample F x clients_per_round, keep the first
    straggler_mode: str = "per-client"      # or "exact": FedProx's count and whole epochs
    personalize: str | None = None          # each client's own model (federated.personal)
    personal_memory: float | None = None    # MiB of shared memory for it; None: half of free
    personal_head_epochs: int | None = None  # fedrep: head epochs before the body's; None: 10
    # fedbuff's (``strategies.fedbuff``): refused by the synchronous strategy
    concurrency: int | None = None          # clients training at once; None: clients_per_round
    buffer_size: int | None = None          # updates per server step; None: K // 2, at most 10
    staleness_weight: str | None = None     # None: FedBuff's 1/sqrt(1+s)
    max_staleness: int | None = None        # older updates dropped; None: none is

    @property
    def sampled_clients(self) -> int:
        """Clients trained per round (at least one; Poisson sampling's expected count)."""
        if self.clients_per_round is not None:
            return self.clients_per_round
        if self.client_fraction is not None:
            return max(1, math.ceil(self.client_fraction * self.clients))
        return min(10, self.clients)

    @property
    def selected_clients(self) -> int:
        """Clients a fixed-size round samples: ``over_select`` x ``sampled_clients`` (the
        first ``sampled_clients`` to report are kept), at most every client."""
        return min(self.clients, math.ceil(self.over_select * self.sampled_clients - 1e-9))

    @property
    def client_eval_rounds(self) -> int | None:
        """Per-client evaluation every N rounds (and the last): --client-eval-every, or with
        --personalize and without it, the last round only (None: no per-client
        evaluation)."""
        if self.client_eval_every is None and self.personalize is not None:
            return self.rounds
        return self.client_eval_every

    @property
    def private(self) -> bool:
        """Whether the run has differential privacy (``--dp-noise``)."""
        return self.dp_noise is not None

    @property
    def sample_rate(self) -> float:
        """The expected fraction of clients per round (Poisson sampling's q)."""
        return self.sampled_clients / self.clients


#: The section's setting names, in their order (the flat names users give).
FEDAVG_SETTINGS = tuple(f.name for f in fields(FedAvgSettings))
#: Of them, the asynchronous strategy's own (``strategies.fedbuff``).
ASYNCHRONOUS_SETTINGS = frozenset({"concurrency", "buffer_size", "staleness_weight",
                                   "max_staleness"})


def privacy_delta(settings: FedAvgSettings) -> float:
    return DEFAULT_DP_DELTA if settings.dp_delta is None else settings.dp_delta


def clip_lr(settings: FedAvgSettings) -> float:
    """Adaptive clipping's geometric step (--dp-clip-lr, or its default)."""
    return settings.dp_clip_lr or DEFAULT_CLIP_LR


def accountant_name(settings: FedAvgSettings) -> str:
    return settings.accountant or "rdp"


def count_noise_std(settings: FedAvgSettings) -> float | None:
    """Std of the noise on adaptive clipping's count (Andrew et al.: expected clients / 20);
    None without adaptive clipping."""
    if settings.dp_clip_quantile is None:
        return None
    if settings.dp_count_noise is not None:
        return settings.dp_count_noise
    return settings.sampled_clients / 20


def updates_noise_multiplier(settings: FedAvgSettings) -> float:
    """The noise multiplier on the updates' sum (less than --dp-noise when adaptive
    clipping's count takes its share)."""
    from ...federated.privacy import update_noise_multiplier

    count = count_noise_std(settings) if settings.private else None
    return update_noise_multiplier(settings.dp_noise, count)


def server_optimizer(settings: FedAvgSettings):
    """The server optimizer the settings name (``federated.server_opt``)."""
    from ...federated.server_opt import build_server_optimizer

    return build_server_optimizer(settings.server_optimizer, settings.server_lr,
                                  settings.server_momentum, settings.server_betas,
                                  settings.server_tau)


def robust_settings_of(config):
    """The run's ``--aggregator``, ``--malicious-fraction`` and ``--attack`` resolved
    (``federated.robust.settings.RobustSettings``): a pure function of the whole config (the
    attackers are drawn from its seed), so every process gets the same."""
    from ...federated.robust.settings import robust_settings   # torch: not at import

    f = config.fedavg
    return robust_settings(f.aggregator, f.malicious_fraction, f.attack, f.clients,
                           f.sampled_clients, config.seed)
