"""fedavg's refusals, in one place: beyond the config's own per-field checks, which
combinations of settings make no sense (``check_fedavg_config``, while the config is built)
and what this run cannot offer them (``check_run``, in the parent before anything starts),
each refused in one line that says why and what to do instead.

Settings are named as the caller wrote them (``setting_name``: ``--clients-per-round`` on
the command line, ``clients_per_round`` from ``fit()``, the key in a config file): these
checks run while the config is built, inside the spelling of the layer that said it."""

from __future__ import annotations

import psutil

from ...comm.dist import gather_buffer_rows
from ...data.sources import CLASSIFICATION
from ...errors import UserError
from ...errors import setting_name as named   # as the caller spelled the setting
from ...federated.availability import EXACT
from ...federated.robust.settings import RobustSettings
from ...report.words import human_bytes
from ..model_state import floating_state
from .gathered import WEIGHT_COLUMNS
from .personal_setup import check_personalize_config, check_personalize_run
from .settings import accountant_name, count_noise_std, privacy_delta, robust_settings_of
from .virtual_clock import check_clock, check_clock_files
from .shared import TABLE_LIMIT_BYTES, controls_placement, table_rows, uses_shared_table


def check_fedavg_config(config) -> None:
    """Combinations that make no sense, refused in one line that says why and what to do."""
    c, f = config, config.fedavg
    if f.clients_per_round is not None and f.client_fraction is not None:
        raise UserError(f"give {named('clients_per_round')} or {named('client_fraction')}, "
                        "not both")
    if f.sampled_clients > f.clients:
        raise UserError(f"{named('clients_per_round')} {f.sampled_clients} is more than "
                        f"{named('clients')} {f.clients}; sample at most every client")
    check_client_path_and_server(config)
    if f.scaffold:
        if c.optimizer != "sgd" or c.momentum:
            raise UserError(f"{named('scaffold')} needs plain client SGD "
                            f"({named('optimizer')} sgd {named('momentum')} 0): its control "
                            "variates assume local steps x -= lr * (g - c_i + c)")
        if f.prox_mu:
            raise UserError(f"{named('scaffold')} and {named('prox_mu')} both correct client "
                            "drift; choose one")
    if f.drop_stragglers and not f.straggler_rate:
        raise UserError(f"{named('drop_stragglers')} drops the clients that "
                        f"{named('straggler_rate')} P makes straggle, and there are none: "
                        f"add {named('straggler_rate')} P")
    if f.straggler_mode == EXACT:
        if not f.straggler_rate:
            raise UserError(f"{named('straggler_mode')} exact decides which clients "
                            f"{named('straggler_rate')} P makes straggle, and there are "
                            f"none: add {named('straggler_rate')} P")
        if f.local_epochs < 2:
            raise UserError(f"{named('straggler_mode')} exact: a straggler does 1 to E-1 "
                            f"whole local epochs, and {named('local_epochs')} is "
                            f"{f.local_epochs}: give {named('local_epochs')} 2 or more, or "
                            f"{named('straggler_mode')} per-client (part of the steps)")
        if f.client_speeds:
            raise UserError(f"{named('straggler_mode')} exact picks the stragglers among the "
                            f"clients a round samples, and {named('client_speeds')} makes the "
                            "virtual clock sample among those online and over-selected: use "
                            f"{named('straggler_mode')} per-client with the clock")
    _check_privacy(f)
    check_clock(config)
    check_personalize_config(config)
    refuse_combinations(robust_settings_of(config), dp=f.dp_clip is not None,
                        scaffold=f.scaffold)


def check_client_path_and_server(config) -> None:
    """The stacked path's and the server optimizer's settings together (fedbuff's too)."""
    c, f = config, config.fedavg
    if f.vectorize_clients == "on" and c.compile:
        raise UserError(f"{named('vectorize_clients')} on and {named('compile')}: stacked "
                        "clients train through torch.func, not the compiled model; choose one")
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


def check_run(config, data, model, plan, out_dir) -> None:
    """What this run cannot offer its settings, refused before anything starts: the shared
    memory SCAFFOLD and DP need (per-client evaluation needs none: each rank reports its
    clients' scores, ``client_evaluation``), a privacy target the first round spends, room
    for SCAFFOLD's variates, and what the rule and the attack need (the
    round's updates in one table that fits -- shared by the workers, or gathered to rank 0
    under torchrun -- and class labels to flip)."""
    c, f = config, config.fedavg
    check_clock_files(config)
    if f.scaffold and data is not None and getattr(data.train, "on_demand", False):
        raise UserError(f"{named('scaffold')} keeps a control variate for every client "
                        f"({f.clients:,} here), but {data.name}'s devices are generated on "
                        "demand so that a round touches only its sampled clients; use "
                        f"FedAvg or FedProx ({named('prox_mu')}), or fewer {named('clients')}")
    if (f.dp_clip is not None or f.scaffold) and not uses_shared_table(c, model, plan):
        what = named("scaffold") if f.scaffold else f"{named('dp_clip')}/{named('dp_noise')}"
        raise UserError(f"{what} needs the round's results in one machine's shared "
                        "memory (every client's row, summed in client order); run "
                        "mptrain's own workers on one machine, or fewer "
                        f"{named('clients_per_round')} for a smaller table")
    if f.private:
        from ...federated.accounting import PrivacyAccountant, require_dp_accounting

        require_dp_accounting()
        first = PrivacyAccountant(accountant_name(f)).epsilon_after(
            f.sample_rate, f.dp_noise, privacy_delta(f))
        if f.target_epsilon is not None and first > f.target_epsilon:
            raise UserError(f"{named('target_epsilon')} {f.target_epsilon:g} is spent by "
                            f"the first round alone (epsilon {first:.3g} at delta "
                            f"{privacy_delta(f):g}); raise it, add noise "
                            f"({named('dp_noise')}) or sample fewer clients")
    if f.scaffold:
        controls_placement(c, model, out_dir)   # refuses when neither place fits
    check_robust(config, data, model, plan)
    check_personalize_run(config, data, model, plan, out_dir)


def check_robust(config, data, model, plan) -> None:
    """What the rule and the attack need from this run: the round's updates in one table
    (shared by the workers, or gathered to rank 0 under torchrun; refused with the figures
    when it does not fit), class labels to flip."""
    robust = robust_settings_of(config)
    numel = sum(t.numel() for t in floating_state(model))
    rows = table_rows(config)
    refusal = table_refusal(robust, rows, numel, TABLE_LIMIT_BYTES, plan.comm.shares_memory)
    if not refusal and not plan.comm.shares_memory and plan.rank_zero_here:
        # Shared tables are counted with /dev/shm's (``shared_bytes``); rank 0's own here.
        refusal = gathered_memory_refusal(robust, rows, numel, plan.workers,
                                          plan.local_workers or plan.workers,
                                          psutil.virtual_memory().available)
    if refusal:
        raise UserError(refusal)
    if robust.attack is not None and robust.attack.name == "label-flip" \
            and data.task != CLASSIFICATION:
        raise UserError(f"{named('attack')} label-flip flips class labels; this data set "
                        f"is regression: choose another {named('attack')}")


def refuse_combinations(settings: RobustSettings, *, dp: bool, scaffold: bool) -> None:
    """The combinations whose guarantees would not hold, refused in one line."""
    if not settings.active:
        return
    what = _what(settings)
    if dp:
        raise UserError(f"{what} with {named('dp_clip')}/{named('dp_noise')} is refused: "
                        "DP-FedAvg's clip is each client's own step (an attacker would skip "
                        "it) and its noise is calibrated to a sum of clipped updates, not to "
                        f"a robust rule; for a server-side clip use {named('aggregator')} "
                        "norm-bound:C")
    if scaffold:
        raise UserError(f"{what} with {named('scaffold')} is refused: SCAFFOLD's control "
                        "variates are averaged with the plain mean, which the rule and the "
                        "attackers would bypass")


def table_refusal(settings: RobustSettings, rows: int, numel: int, limit: int,
                  shares_memory: bool) -> str | None:
    """Why the rule cannot have the round's updates in one table (None: it can). With
    shared memory the table is shared by every worker; without (torchrun) it is rank 0's
    own, gathered from the others' rows (``gathered``): either way one
    table of ``rows x numel`` floats, counted against ``limit``."""
    if not settings.needs_table:
        return None
    what = _what(settings)
    need = rows * numel * 4
    if need > limit:
        where = "one shared table" if shares_memory else "one table on rank 0"
        return (f"{what} needs every client's update in {where}: {rows} clients x "
                f"{numel:,} parameters x 4 bytes = {human_bytes(need)}, over the "
                f"{human_bytes(limit)} limit; sample fewer {named('clients_per_round')}")
    return None


def gathered_memory_refusal(settings: RobustSettings, rows: int, numel: int, ranks: int,
                            local_workers: int, available: int) -> str | None:
    """Why rank 0's machine cannot hold the gathered table now (None: it can). Under
    torchrun the table is private memory, not /dev/shm: rank 0's ``rows x numel`` floats;
    for each other rank on its machine, the rows of its own clients of the round (at most
    ``ceil(rows / ranks)``, each with its weight's two columns); and the gather's buffers
    (a block of rows on each of those ranks, and on rank 0 one more per rank: at most
    ``comm.dist.GATHER_BYTES`` and a block) -- counted against the memory ``available``
    now."""
    if not settings.needs_table:
        return None
    row, sent = numel * 4, (numel + WEIGHT_COLUMNS) * 4
    table = rows * row
    share = -(-rows // ranks)
    others = (local_workers - 1) * share * sent
    buffers = (ranks + local_workers) * gather_buffer_rows(share, sent, ranks) * sent \
        if ranks > 1 else 0
    if table + others + buffers <= available:
        return None
    theirs = f" + {human_bytes(others)} for its other {local_workers - 1} rank(s)' own rows" \
        if others else ""
    gather = f" + {human_bytes(buffers)} for the gather's buffers" if buffers else ""
    return (f"{_what(settings)} gathers every client's update to rank 0: {rows} clients x "
            f"{numel:,} parameters x 4 bytes = {human_bytes(table)}{theirs}{gather} on rank "
            f"0's machine, which has {human_bytes(available)} of memory available; sample "
            f"fewer {named('clients_per_round')}, or free memory there")


def _what(settings: RobustSettings) -> str:
    """What a refusal is about: the rule, or the attack when the rule is the mean."""
    if settings.rule.name != "mean":
        return f"{named('aggregator')} {settings.rule.name}"
    return f"{named('attack')} {settings.attack.name}"
