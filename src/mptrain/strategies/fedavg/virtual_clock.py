"""Which clients a fedavg round trains (:class:`RoundSampler`), and, with
``--client-speeds``, the virtual clock's say in it (``federated.clock``).

Without a clock a round trains the clients it samples. With one, every process plays the
same clock: the round starts at the virtual time the last one ended; it samples among the
clients online then (``--availability-trace``), ``--over-select F`` x ``clients_per_round``
of them; each takes ``update_seconds`` (its data x local epochs -- a straggler's part of
them -- x its seconds a sample, plus the model down and its update up); ``time_round``
says which report in time. Only those train: a late, lost or cancelled client's update
would weigh 0, so it is not computed at all. The clock reads seeds, data sizes and the
speeds, never the wall clock, so every rank and every ``--workers`` gets the same rounds;
a resumed run replays the clock from round 1 (cheap: no training).

Dropouts (``--dropout-rate``) train and never report, and with ``--drop-stragglers``
stragglers never report (untrained: ``ClientTrainer.unheard``), as without a clock
(``availability.AvailabilityConfig.client_turn`` decides both, here and in the worker); the
round waits for them as for anyone (the server learns they will not report when their
connection closes) but they do not count towards the ``clients_per_round`` reports that
close an over-selected round.
"""

from __future__ import annotations

from ...errors import ClientFailedError, UserError
from ...errors import setting_name as named   # as the caller spelled the setting
from ...federated import availability
from ...federated.client import full_steps
from ...federated.clock import (ClientRun, availability_trace, client_speeds, time_round)
from ...federated.sampling import poisson_sample, sample_clients
from .personal_setup import personal_extra_epochs
from .sample import round_sample


class RoundSampler:
    """The clients each round trains; ``figures``: the clock's for the last round (empty
    without a clock)."""

    def __init__(self, config, sizes: list[int], rows: int, model_bytes: int):
        self.config, self.rows = config, rows
        f = config.fedavg
        self.clock = RoundClock(config, sizes, model_bytes) if f.client_speeds else None
        self.figures: dict = {}

    def sample(self, round_index: int) -> list[int]:
        if self.clock is None:
            return round_sample(self.config, round_index, self.rows)
        trained, self.figures = self.clock.play_to(round_index)
        if len(trained) > self.rows:   # Poisson: < 1e-20 per round
            raise ClientFailedError(f"round {round_index + 1} sampled {len(trained)} "
                                    "clients, more than the table holds")
        return trained


class RoundClock:
    """The virtual clock of a synchronous run, played one round after another."""

    def __init__(self, config, sizes: list[int], model_bytes: int):
        f = config.fedavg
        self.config, self.sizes, self.model_bytes = config, sizes, model_bytes
        self.availability = availability.AvailabilityConfig.of(config)
        self.speeds = client_speeds(f.client_speeds, f.clients, config.seed)
        self.trace = availability_trace(f.availability_trace, f.clients)
        self.personal_epochs = personal_extra_epochs(config)
        self.now_s = 0.0
        self.rounds_played = 0

    def play_to(self, round_index: int) -> tuple[list[int], dict]:
        """Round ``round_index``'s trained clients and figures (the rounds before it are
        played first where a resumed run has not)."""
        if round_index < self.rounds_played:
            raise RuntimeError("the virtual clock cannot go back")
        while True:
            trained, figures = self._play(self.rounds_played)
            if self.rounds_played > round_index:
                return trained, figures

    def candidates(self, round_index: int) -> list[int]:
        """The clients the round samples at ``now_s`` among those online."""
        c, f = self.config, self.config.fedavg
        online = self.trace.available_clients(f.clients, self.now_s) \
            if self.trace.windows else None
        if f.sampling == "poisson":
            drawn = poisson_sample(f.clients, f.sample_rate, c.seed, round_index)
            return drawn if online is None else sorted(set(drawn) & set(online))
        if online is None:
            return sample_clients(f.clients, f.selected_clients, c.seed, round_index)
        picks = sample_clients(len(online), min(f.selected_clients, len(online)), c.seed,
                               round_index)
        return [online[i] for i in picks]

    def update_seconds(self, client: int, round_index: int) -> ClientRun:
        """``client``'s run in round ``round_index``: its work (a straggler's share of it)
        and whether it reports."""
        c, f = self.config, self.config.fedavg
        full = full_steps(self.sizes[client], c.batch_size, f.local_epochs)
        # per-client stragglers only (``exact`` is refused with a clock): no sample needed
        turn = self.availability.client_turn(round_index, client, full)
        epochs = f.local_epochs * turn.budget / full if full else 0.0
        epochs += self.personal_epochs   # FedRep's head, Ditto's personal model: in full
        seconds = self.speeds.update_seconds(client, self.sizes[client], epochs,
                                             self.model_bytes)
        return ClientRun(client, seconds, reports=turn.reports)

    def _play(self, round_index: int) -> tuple[list[int], dict]:
        f = self.config.fedavg
        began = self.now_s
        if self.trace.windows and not self.trace.available_clients(f.clients, self.now_s):
            self.now_s = self.trace.next_online(f.clients, self.now_s)   # nobody online
        candidates = self.candidates(round_index)
        timing = time_round([self.update_seconds(c, round_index) for c in candidates],
                            self.now_s, self.trace, f.round_deadline,
                            None if f.sampling == "poisson" else f.sampled_clients)
        self.now_s += timing.duration_s
        self.rounds_played = round_index + 1
        return list(timing.trained), {
            "virtual_time_s": self.now_s, "round_virtual_s": self.now_s - began,
            "sampled": len(candidates), "late": len(timing.late),
            "offline": len(timing.offline), "cancelled": len(timing.cancelled)}


def check_clock(config) -> None:
    """The clock's settings, alone and with the others (while the config is built)."""
    f = config.fedavg
    if not f.client_speeds:
        given = [name for name, value in (("round_deadline", f.round_deadline),
                                          ("availability_trace", f.availability_trace))
                 if value is not None] + (["over_select"] if f.over_select != 1 else [])
        if given:
            raise UserError(f"{named(given[0])} acts on the virtual clock; add "
                            f"{named('client_speeds')} lognormal (or constant, or a file)")
        return
    if f.over_select != 1 and f.sampling == "poisson":
        raise UserError(f"{named('over_select')} over-selects a fixed-size sample; "
                        f"{named('sampling')} poisson draws each client alone: drop one")
    if f.private and (f.over_select != 1 or f.availability_trace):
        said = named("over_select" if f.over_select != 1 else "availability_trace")
        raise UserError(f"{said} changes how likely a client is to be in a round, which "
                        f"the privacy accountant's q assumes it does not: drop {said} or "
                        f"{named('dp_noise')}")


def check_clock_files(config) -> None:
    """Read the speeds and the trace once in the parent, so a bad one is one line before
    anything starts (the workers read them again)."""
    f = config.fedavg
    if f.client_speeds:
        client_speeds(f.client_speeds, f.clients, config.seed)
        availability_trace(f.availability_trace, f.clients)


def describe(config) -> str | None:
    """The banner's line about the clock (None without one)."""
    f = config.fedavg
    if not f.client_speeds:
        return None
    parts = [f"virtual clock: speeds {f.client_speeds}"]
    if f.availability_trace:
        parts.append(f"online per {f.availability_trace}")
    if f.round_deadline is not None:
        parts.append(f"round deadline {f.round_deadline:g} s")
    if f.over_select != 1:
        parts.append(f"over-select {f.over_select:g} ({f.selected_clients} sampled, first "
                     f"{f.sampled_clients} kept)")
    return ", ".join(parts)


#: The clock's keys of rank 0's round report, copied into the round's row as they are.
ROUND_KEYS = ("virtual_time_s", "round_virtual_s", "sampled", "late", "offline",
              "cancelled")


def summary_fields(config, last_row: dict | None) -> dict:
    f = config.fedavg
    if not f.client_speeds:
        return {}
    return {"client_speeds": f.client_speeds, "availability_trace": f.availability_trace,
            "round_deadline": f.round_deadline, "over_select": f.over_select,
            "virtual_time_s": (last_row or {}).get("virtual_time_s")}
