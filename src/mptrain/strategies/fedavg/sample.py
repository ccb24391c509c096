"""The clients a round samples -- a fixed-size uniform sample, or Poisson's with DP -- the
same in every worker: the worker takes its share of them, and a client's trainer asks who
else is in its round where that decides who straggles (``--straggler-mode exact``)."""

from __future__ import annotations

from ...errors import ClientFailedError
from ...federated.availability import EXACT
from ...federated.sampling import poisson_sample, sample_clients


def round_sample(config, round_index: int, rows: int) -> list[int]:
    """Round ``round_index``'s sampled clients, in order; ``rows``: the round table's rows
    (a Poisson sample larger than it, < 1e-20 a round, fails the round)."""
    c, f = config, config.fedavg
    if f.sampling == "poisson":
        sampled = poisson_sample(f.clients, f.sample_rate, c.seed, round_index)
        if len(sampled) > rows:
            raise ClientFailedError(f"round {round_index + 1} sampled {len(sampled)} "
                                    "clients, more than the table holds")
        return sampled
    return sample_clients(f.clients, f.sampled_clients, c.seed, round_index)


class RoundSample:
    """A worker's copy of the round's sample for the straggler draw, drawn once a round
    and only where it decides who straggles (``exact``; ``per-client`` draws per client)."""

    def __init__(self, config, rows: int):
        self.config, self.rows = config, rows
        self._drawn: tuple[int, list[int]] | None = None

    def for_stragglers(self, round_index: int) -> list[int]:
        if self.config.fedavg.straggler_mode != EXACT:
            return []
        if self._drawn is None or self._drawn[0] != round_index:
            self._drawn = (round_index, round_sample(self.config, round_index, self.rows))
        return self._drawn[1]
