"""fedavg's refusals beyond the config's own per-field checks: which combinations of settings
make no sense, each refused in one line that says why and what to do instead."""

from __future__ import annotations

from ...errors import UserError
from ...federated.robust_server import refuse_combinations
from .settings import count_noise_std, robust_settings_of


def check_fedavg_config(config) -> None:
    """Combinations that make no sense, refused in one line that says why and what to do."""
    c, f = config, config.fedavg
    if f.clients_per_round is not None and f.client_fraction is not None:
        raise UserError("give --clients-per-round or --client-fraction, not both")
    if f.sampled_clients > f.clients:
        raise UserError(f"--clients-per-round {f.sampled_clients} is more than "
                        f"--clients {f.clients}; sample at most every client")
    if f.vectorize_chunk is not None and f.vectorize_clients == "off":
        raise UserError("--vectorize-chunk sizes stacked cohorts of clients, and "
                        "--vectorize-clients off trains none; drop one of them")
    adaptive = f.server_optimizer != "sgd"
    if adaptive and f.server_momentum:
        raise UserError(f"--server-momentum is sgd's; --server-optimizer "
                        f"{f.server_optimizer} has its own first moment: set "
                        "--server-betas B1,B2 instead")
    for name, value in (("server-betas", f.server_betas), ("server-tau", f.server_tau)):
        if value is not None and not adaptive:
            raise UserError(f"--{name} does nothing with --server-optimizer sgd; choose "
                            "--server-optimizer adam, yogi or adagrad (or use "
                            "--server-momentum)")
    if f.scaffold:
        if c.optimizer != "sgd" or c.momentum:
            raise UserError("--scaffold needs plain client SGD (--optimizer sgd "
                            "--momentum 0): its control variates assume local steps "
                            "x -= lr * (g - c_i + c)")
        if f.prox_mu:
            raise UserError("--scaffold and --prox-mu both correct client drift; "
                            "choose one")
    _check_privacy(f)
    refuse_combinations(robust_settings_of(config), dp=f.dp_clip is not None,
                        scaffold=f.scaffold)


def _check_privacy(f) -> None:
    dp_only = {"dp-delta": f.dp_delta, "target-epsilon": f.target_epsilon,
               "accountant": f.accountant, "dp-count-noise": f.dp_count_noise}
    if not f.private:
        given = [name for name, value in dp_only.items() if value is not None]
        if given:
            raise UserError(f"--{given[0]} is about differential privacy; add "
                            "--dp-noise Z (and --dp-clip C)")
    if f.dp_clip_quantile is None:
        if f.dp_clip_lr is not None or f.dp_count_noise is not None:
            raise UserError("--dp-clip-lr and --dp-count-noise tune adaptive clipping; "
                            "add --dp-clip-quantile Q")
    elif f.dp_clip is None:
        raise UserError("--dp-clip-quantile adapts a clip: give the starting --dp-clip C")
    if not f.private:
        return
    if f.dp_clip is None:
        raise UserError("--dp-noise needs --dp-clip C: the noise is z times the clip of "
                        "each client's update")
    if f.sampling != "poisson":
        raise UserError("--dp-noise needs --sampling poisson: the accountant assumes each "
                        "client joins a round independently with probability q; a "
                        "fixed-size sample would be accounted wrongly")
    if f.scaffold:
        raise UserError("--scaffold with --dp-noise is refused: SCAFFOLD's control "
                        "variates are a second message per client that is neither "
                        "clipped nor noised, so the privacy accounting would not hold")
    if f.dp_clip_quantile is not None:
        std = count_noise_std(f)
        if 2 * std <= f.dp_noise:
            raise UserError(f"adaptive clipping's count noise {std:g} must exceed half "
                            f"of --dp-noise ({f.dp_noise / 2:g}), or it takes the whole "
                            "privacy budget: give --dp-count-noise above that (default: "
                            "expected clients per round / 20)")
