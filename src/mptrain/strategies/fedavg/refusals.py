"""fedavg's refusals beyond the config's own per-field checks: which combinations of settings
make no sense, each refused in one line that says why and what to do instead.

Settings are named as the caller wrote them (``setting_name``: ``--clients-per-round`` on
the command line, ``clients_per_round`` from ``fit()``, the key in a config file): these
checks run while the config is built, inside the spelling of the layer that said it."""

from __future__ import annotations

from ...errors import UserError
from ...errors import setting_name as named   # as the caller spelled the setting
from .robust_worker import refuse_combinations
from .settings import count_noise_std, robust_settings_of


def check_fedavg_config(config) -> None:
    """Combinations that make no sense, refused in one line that says why and what to do."""
    c, f = config, config.fedavg
    if f.clients_per_round is not None and f.client_fraction is not None:
        raise UserError(f"give {named('clients_per_round')} or {named('client_fraction')}, "
                        "not both")
    if f.sampled_clients > f.clients:
        raise UserError(f"{named('clients_per_round')} {f.sampled_clients} is more than "
                        f"{named('clients')} {f.clients}; sample at most every client")
    if f.vectorize_chunk is not None and f.vectorize_clients == "off":
        raise UserError(f"{named('vectorize_chunk')} sizes stacked cohorts of clients, and "
                        f"{named('vectorize_clients')} off trains none; drop one of them")
    adaptive = f.server_optimizer != "sgd"
    if adaptive and f.server_momentum:
        raise UserError(f"{named('server_momentum')} is sgd's; {named('server_optimizer')} "
                        f"{f.server_optimizer} has its own first moment: set "
                        f"{named('server_betas')} B1,B2 instead")
    for name, value in (("server_betas", f.server_betas), ("server_tau", f.server_tau)):
        if value is not None and not adaptive:
            raise UserError(f"{named(name)} does nothing with {named('server_optimizer')} sgd; "
                            f"choose {named('server_optimizer')} adam, yogi or adagrad (or use "
                            f"{named('server_momentum')})")
    if f.scaffold:
        if c.optimizer != "sgd" or c.momentum:
            raise UserError(f"{named('scaffold')} needs plain client SGD "
                            f"({named('optimizer')} sgd {named('momentum')} 0): its control "
                            "variates assume local steps x -= lr * (g - c_i + c)")
        if f.prox_mu:
            raise UserError(f"{named('scaffold')} and {named('prox_mu')} both correct client "
                            "drift; choose one")
    _check_privacy(f)
    refuse_combinations(robust_settings_of(config), dp=f.dp_clip is not None,
                        scaffold=f.scaffold)


def _check_privacy(f) -> None:
    dp_only = {"dp_delta": f.dp_delta, "target_epsilon": f.target_epsilon,
               "accountant": f.accountant, "dp_count_noise": f.dp_count_noise}
    if not f.private:
        given = [name for name, value in dp_only.items() if value is not None]
        if given:
            raise UserError(f"{named(given[0])} is about differential privacy; add "
                            f"{named('dp_noise')} Z (and {named('dp_clip')} C)")
    if f.dp_clip_quantile is None:
        if f.dp_clip_lr is not None or f.dp_count_noise is not None:
            raise UserError(f"{named('dp_clip_lr')} and {named('dp_count_noise')} tune adaptive "
                            f"clipping; add {named('dp_clip_quantile')} Q")
    elif f.dp_clip is None:
        raise UserError(f"{named('dp_clip_quantile')} adapts a clip: give the starting "
                        f"{named('dp_clip')} C")
    if not f.private:
        return
    if f.dp_clip is None:
        raise UserError(f"{named('dp_noise')} needs {named('dp_clip')} C: the noise is z "
                        "times the clip of each client's update")
    if f.sampling != "poisson":
        raise UserError(f"{named('dp_noise')} needs {named('sampling')} poisson: the accountant "
                        "assumes each client joins a round independently with probability "
                        "q; a fixed-size sample would be accounted wrongly")
    if f.scaffold:
        raise UserError(f"{named('scaffold')} with {named('dp_noise')} is refused: SCAFFOLD's "
                        "control variates are a second message per client that is neither "
                        "clipped nor noised, so the privacy accounting would not hold")
    if f.dp_clip_quantile is not None:
        std = count_noise_std(f)
        if 2 * std <= f.dp_noise:
            raise UserError(f"adaptive clipping's count noise {std:g} must exceed half "
                            f"of {named('dp_noise')} ({f.dp_noise / 2:g}), or it takes the "
                            f"whole privacy budget: give {named('dp_count_noise')} above that "
                            "(default: expected clients per round / 20)")
