"""What fedavg derives from its settings: the defaults a setting left out stands for (the
privacy delta, the adaptive clip's step, the count noise) and the server optimizer the
settings describe. One place, so the parent, the workers and the reports agree."""

from __future__ import annotations

from ...federated.server_opt import build_server_optimizer

DEFAULT_DP_DELTA = 1e-5
DEFAULT_CLIP_LR = 0.2


def dp_delta(config) -> float:
    return DEFAULT_DP_DELTA if config.dp_delta is None else config.dp_delta


def clip_lr(config) -> float:
    """Adaptive clipping's geometric step (--dp-clip-lr, or its default)."""
    return config.dp_clip_lr or DEFAULT_CLIP_LR


def accountant_name(config) -> str:
    return config.accountant or "rdp"


def count_noise_std(config) -> float | None:
    """Std of the noise on adaptive clipping's count (Andrew et al.: expected clients / 20);
    None without adaptive clipping."""
    if config.dp_clip_quantile is None:
        return None
    if config.dp_count_noise is not None:
        return config.dp_count_noise
    return config.sampled_clients / 20


def dp_noise_of_updates(config) -> float:
    """The noise multiplier on the updates' sum (less than --dp-noise when adaptive
    clipping's count takes its share)."""
    from ...federated.privacy import update_noise_multiplier

    count = count_noise_std(config) if config.private else None
    return update_noise_multiplier(config.dp_noise, count)


def server_optimizer(config):
    """The server optimizer the settings name (``federated.server_opt``)."""
    return build_server_optimizer(config.server_optimizer, config.server_lr,
                                  config.server_momentum, config.server_betas,
                                  config.server_tau)
